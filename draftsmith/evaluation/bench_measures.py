"""The figures a bench run is built from, shared by `run_bench`, `run_compare` and the scripts.

What the run ran on (`environment`), the interleaved order every comparison runs in, and what is
drawn from a method's generations: Spec-Bench's mean tokens/s, acceptance per category / turn / set
and per context length, the K an adaptive engine chose, and the step costs as the loop ran them.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from tqdm.auto import tqdm

from draftsmith.infer.engine import GenerationResult, predicted_speedup
from draftsmith.infer.hardware import cpu_info
from draftsmith.infer.metrics import SpecMetrics
from draftsmith.models import checkpoint_identity


def environment(target, drafter, engine=None) -> dict:
    import transformers

    import draftsmith

    cpu = cpu_info()
    dev = target.device
    tree = engine.tree if engine is not None else None
    return {
        "target": target.name,
        "target_note": getattr(target, "note", None),
        "draft": None if drafter is None else drafter.name,
        "tree": None if tree is None else {k: v for k, v in dataclasses.asdict(tree).items() if v is not None},
        "verification": engine.verification if engine is not None else "lossless",
        "drafter_kind": None if drafter is None else drafter.kind,
        # A draft LM drafting over a draft vocabulary (FR-Spec): how many target ids it proposes from.
        "draft_vocab_size": None if drafter is None or drafter.draft_ids is None else int(drafter.draft_ids.numel()),
        # Which checkpoint exactly (path, kind, target, sha256): `publish --results` checks it.
        "draft_checkpoint": checkpoint_identity(None if drafter is None else drafter.name),
        "dtype": str(target.dtype).replace("torch.", ""),
        "dtype_reason": getattr(target, "dtype_reason", None),
        "device": str(dev),
        "compiled": bool(getattr(target, "compiled", False)),
        "cpu_matmul": getattr(target, "cpu_matmul", None),
        "target_forward": getattr(target, "forward_why", None),  # models/fused.py's or transformers'
        "draft_forward": None if drafter is None else drafter.forward_why,
        "placement": getattr(target, "placement", None),  # a target split over GPUs: where, and the caveat
        "hardware": torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"{cpu['model']}, {torch.get_num_threads()} threads",
        "cpu": cpu,
        "versions": {
            "draftsmith": draftsmith.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }


def interleaved(run, names: list[str], prompts, desc: str, progress: bool = True, into=None) -> dict[str, list]:
    """{name: [run(name, prompt, i) for every prompt]}, the order of the names rotating from one
    prompt to the next, so no method always runs first and machine drift hits all alike. `into`:
    the dict to fill (a caller interrupted midway still holds the runs that finished)."""
    out: dict[str, list] = into if into is not None else {}
    out.update({n: [] for n in names})
    for i, p in enumerate(tqdm(prompts, desc=desc, disable=not progress)):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            out[name].append(run(name, p, i))
    return out


def _mean_tps(results: list[tuple[int, float]]) -> float | None:
    return statistics.mean(n / s for n, s in results) if results else None


def _groups(prompts) -> dict[str, dict[str, list[int]]]:
    """Prompt indices by category (`domain`, in order of first appearance: MT-Bench's own order),
    by MT-Bench turn, and by prompt set when a run mixes several."""
    keys = {
        "by_domain": lambda p: p.domain,
        "by_turn": lambda p: f"turn{p.turn}" if getattr(p, "turn", None) else None,
        "by_set": lambda p: getattr(p, "source", None),
    }
    out = {}
    for field, key in keys.items():
        idx: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            if (k := key(p)) is not None:
                idx.setdefault(k, []).append(i)
        if field == "by_domain" or (field == "by_turn" and idx) or len(idx) > 1:
            out[field] = idx
    return out


def breakdown(prompts, results: list[GenerationResult], baseline: list[GenerationResult] | None = None) -> dict:
    """Acceptance per category, per turn and per set, the table shape of the EAGLE / SpecForge
    papers: each group's counts are pooled (τ = 1 + Σ accepted / Σ drafts, never a mean of the
    prompts' τ), so the groups of a split pool back to the overall figures exactly. With
    `baseline` (plain decoding on the same prompts), each group's Spec-Bench speedup too."""
    out = {}
    for field, groups in _groups(prompts).items():
        out[field] = {}
        for name, idx in groups.items():
            m = SpecMetrics()
            for i in idx:
                m = m.merge(results[i].metrics)
            row = {**m.as_dict(), "num_prompts": len(idx)}
            if baseline is not None:
                tps = lambda rs: _mean_tps([(len(rs[i].tokens), rs[i].elapsed_s) for i in idx])  # noqa: E731
                row["speedup"] = tps(results) / tps(baseline)
            out[field][name] = row
    return out


def adaptive_summary(results: list[GenerationResult]) -> dict:
    """The K an adaptive engine drafted at each step, per generation, and how often each K was
    chosen overall (0: a plain step)."""
    per = [r.extra["adaptive_k"] for r in results]
    counts: dict[str, int] = {}
    for a in per:
        for key, n in a["k_counts"].items():
            counts[key] = counts.get(key, 0) + n
    order = sorted(counts, key=lambda key: (key == "tree", int(key) if key.isdigit() else 0))
    return {
        "k_max": per[0]["k_max"],
        "k_counts": {key: counts[key] for key in order},
        "k_per_step": [a["k_per_step"] for a in per],
    }


def context_buckets(results: list[GenerationResult], edges: tuple[int, ...]) -> dict:
    """Mean acceptance length per context-length bucket (acceptance drifts as the context grows,
    and with it the features a drafter was trained on): `edges` (64, 128) gives <64, 64-127, >=128.
    A step's context is the prompt plus everything emitted before its verify forward; τ counts
    the bonus token, as SpecMetrics does, so the buckets' step-weighted mean is the overall τ."""
    labels = [f"<{edges[0]}"] + [f"{a}-{b - 1}" for a, b in zip(edges, edges[1:])] + [f">={edges[-1]}"]
    sums = {label: [0, 0] for label in labels}
    for r in results:
        for context, accepted in r.steps:
            label = labels[sum(context >= e for e in edges)]
            sums[label][0] += accepted + 1
            sums[label][1] += 1
    return {
        label: {"mean_acceptance_length": tok / steps, "steps": steps} for label, (tok, steps) in sums.items() if steps
    }


def in_loop_times(results: list[GenerationResult]) -> dict | None:
    """Median seconds per step of drafting and of verifying over every step of `results`, as the
    engine timed them inside its loop (GenerationResult.extra["step_times_s"]), and per generation
    (means) the seconds spent inside those steps and outside them (prefill, stop checks, host
    work), with the decode phase's tokens/s (Spec-Bench's mean per generation; the first token
    comes from the prefill, so it is not counted); None if untimed."""
    times = [r.extra.get("step_times_s") for r in results]
    if not times or any(t is None for t in times):
        return None
    draft = [x for t in times for x in t["draft"]]
    verify = [x for t in times for x in t["verify"]]
    if not verify:
        return None
    in_steps = [sum(t["draft"]) + sum(t["verify"]) for t in times]
    return {
        "draft": statistics.median(draft),
        "verify": statistics.median(verify),
        "in_steps_s": statistics.fmean(in_steps),
        "outside_steps_s": statistics.fmean(r.elapsed_s - s for r, s in zip(results, in_steps)),
        "decode_tokens_per_s": _mean_tps([(len(r.tokens) - 1, s) for r, s in zip(results, in_steps) if s > 0]),
    }


def _in_loop_prediction(tau: float, plain: dict | None, spec: dict | None) -> dict:
    """The step costs as the loop really ran them (plain's verify is its decode step), the speedup
    they predict, and where each generation's time went: inside the steps (the decode phase the
    speed model describes) and outside them (prefill of target and draft, the stop checks, host
    work). `speedup_decode` is the measured speedup of the decode phase alone; {} when either run
    was untimed."""
    if not plain or not spec:
        return {}
    t = {"t_step": plain["verify"], "t_draft": spec["draft"], "t_verify": spec["verify"]}
    return {
        "step_costs_in_loop_s": t,
        "predicted_speedup_in_loop": predicted_speedup(tau, t["t_step"], t["t_draft"], t["t_verify"]),
        "time_split_s": {
            "plain": {"in_steps": plain["in_steps_s"], "outside_steps": plain["outside_steps_s"]},
            "speculative": {"in_steps": spec["in_steps_s"], "outside_steps": spec["outside_steps_s"]},
        },
        "speedup_decode": spec["decode_tokens_per_s"] / plain["decode_tokens_per_s"],
    }
