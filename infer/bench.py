"""`draftsmith bench` / `eval`: acceptance and speed of a drafter, measured side by side.

Speed follows Spec-Bench: batch size 1, a warm-up, device synchronised around each request,
speedup = mean over prompts of the method's tokens/s ÷ the same mean for plain decoding. The
compared methods run on the same prompts in one process, interleaved prompt by prompt (the
order rotates), so machine noise hits all of them alike:

- plain        our engine, no drafter (the baseline every speedup is relative to)
- speculative  our engine with the drafter
- hf_plain     transformers `generate()` (shows our baseline is not a slow straw man)
- hf_assisted  transformers `generate(assistant_model=draft)` with the same draft, constant K
               and confidence threshold 0 (set in the draft's generation_config, where
               transformers reads them); only for drafters that are plain causal LMs.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import time
from collections import defaultdict

import torch
from tqdm.auto import tqdm

from .engine import Engine, GenerationResult, predicted_speedup
from .metrics import SpecMetrics
from .sampling import SamplingConfig
from .tree import TreeConfig


def _hf_generate(model, ids, max_new_tokens, sampling: SamplingConfig, eos, pad, seed, assistant=None):
    """One transformers generate() call, timed; returns (new token ids, seconds)."""
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=sorted(eos), pad_token_id=pad, do_sample=not sampling.greedy)
    if sampling.greedy:
        kwargs.update(temperature=None, top_k=None, top_p=None)
    else:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    inp = torch.tensor([ids], device=model.device)
    torch.manual_seed(seed)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), **kwargs)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, inp.shape[1] :].tolist(), time.perf_counter() - t


def configure_hf_assistant(draft_model, k: int) -> None:
    """Constant K, no confidence cut-off: the fair classic-speculative baseline in transformers."""
    gc = draft_model.generation_config
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0


def environment(target, drafter, engine=None) -> dict:
    import transformers

    import draftsmith

    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    dev = target.device
    tree = engine.tree if engine is not None else None
    return {
        "target": target.name,
        "target_note": getattr(target, "note", None),
        "draft": getattr(drafter, "name", None),
        "tree": None if tree is None else {k: v for k, v in dataclasses.asdict(tree).items() if v is not None},
        "verification": engine.verification if engine is not None else "lossless",
        "drafter_kind": getattr(drafter, "kind", None),
        "dtype": str(target.dtype).replace("torch.", ""),
        "device": str(dev),
        "hardware": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{cpu}, {torch.get_num_threads()} threads",
        "versions": {"draftsmith": draftsmith.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
    }


def _mean_tps(results: list[tuple[int, float]]) -> float | None:
    return statistics.mean(n / s for n, s in results) if results else None


def run_eval(target, drafter, prompts, k, max_new_tokens, sampling, seed=0, progress=True, tree=None, verification="lossless") -> dict:
    """Acceptance metrics only (no baselines, no timing claims), overall and per domain."""
    engine = Engine(target, drafter, k, tree=tree, verification=verification)
    total, by_domain = SpecMetrics(), defaultdict(SpecMetrics)
    for i, p in enumerate(tqdm(prompts, desc="eval", disable=not progress)):
        r = engine.generate(p.ids, max_new_tokens, sampling, seed=seed + i)
        total = total.merge(r.metrics)
        by_domain[p.domain] = by_domain[p.domain].merge(r.metrics)
    return {
        **environment(target, drafter, engine),
        "num_speculative_tokens": k,
        "temperature": sampling.temperature,
        "num_prompts": len(prompts),
        **total.as_dict(),
        "by_domain": {d: m.as_dict() for d, m in sorted(by_domain.items())},
    }


def run_bench(
    target, drafter, prompts, k, max_new_tokens, sampling, seed=0, baselines=("hf_plain", "hf_assisted"), progress=True,
    tree=None, verification="lossless",
) -> dict:
    """Plain vs speculative decoding (ours) plus the transformers `baselines` named, interleaved."""
    engine = Engine(target, drafter, k, tree=tree, verification=verification)
    assistant = drafter.as_assistant_model() if hasattr(drafter, "as_assistant_model") else None
    if assistant is not None:
        configure_hf_assistant(assistant, k)
    eos, pad = target.eos_token_ids, target.tokenizer.pad_token_id
    pad = pad if pad is not None else min(eos)

    def ours(speculative):
        return lambda p, s: engine.generate(p.ids, max_new_tokens, sampling, seed=s, speculative=speculative)

    def hf(assistant_model):
        def run(p, s):
            toks, secs = _hf_generate(target.model, p.ids, max_new_tokens, sampling, eos, pad, s, assistant_model)
            return GenerationResult(toks, [], "", SpecMetrics(), secs, 0, len(p.ids))

        return run

    methods = {"plain": ours(False), "speculative": ours(True)}
    if "hf_plain" in baselines:
        methods["hf_plain"] = hf(None)
    if "hf_assisted" in baselines and assistant is not None:
        methods["hf_assisted"] = hf(assistant)
    names = list(methods)

    for name in names:  # warm-up: allocator, kernels, lazy init; not recorded
        methods[name](prompts[0], seed)
    outputs: dict[str, list[GenerationResult]] = {n: [] for n in names}
    for i, p in enumerate(tqdm(prompts, desc="bench", disable=not progress)):
        for j in range(len(names)):  # rotate the order so no method always runs first
            name = names[(i + j) % len(names)]
            outputs[name].append(methods[name](p, seed + i))

    spec = outputs["speculative"]
    metrics, by_domain = SpecMetrics(), defaultdict(SpecMetrics)
    for p, r in zip(prompts, spec):
        metrics = metrics.merge(r.metrics)
        by_domain[p.domain] = by_domain[p.domain].merge(r.metrics)
    tps = {n: _mean_tps([(len(r.tokens), r.elapsed_s) for r in outs]) for n, outs in outputs.items()}
    costs = engine.measure_step_costs(prompts[0].ids)
    tau = metrics.mean_acceptance_length

    def ratio(a, b):
        return tps[a] / tps[b] if tps.get(a) and tps.get(b) else None

    def same(a, b):
        return all(x.tokens == y.tokens for x, y in zip(outputs[a], outputs[b]))

    result = {
        **environment(target, drafter, engine),
        "num_speculative_tokens": k,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "num_prompts": len(prompts),
        **metrics.as_dict(),
        "tokens_per_s": tps["speculative"],
        "speedup": ratio("speculative", "plain"),
        "speedup_vs_hf_assisted": ratio("speculative", "hf_assisted"),
        "predicted_speedup": predicted_speedup(tau, costs["t_step"], costs["t_draft_k"], costs["t_verify"]),
        "plain_vs_hf_plain": ratio("plain", "hf_plain"),
        "greedy_outputs_match": same("speculative", "plain") if sampling.greedy else None,
        "step_costs_s": costs,
        "by_domain": {d: m.as_dict() for d, m in sorted(by_domain.items())},
        "methods": {
            n: {
                "tokens_per_s": tps[n],
                "speedup": ratio(n, "plain"),
                "generated_tokens": sum(len(r.tokens) for r in outputs[n]),
                "per_prompt_tokens_per_s": [len(r.tokens) / r.elapsed_s for r in outputs[n]],
                "outputs_match_plain": same(n, "plain") if sampling.greedy else None,
            }
            for n in names
        },
    }
    return result


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
    return {label: {"mean_acceptance_length": tok / steps, "steps": steps} for label, (tok, steps) in sums.items() if steps}


@dataclasses.dataclass
class Method:
    """One speculative configuration in a side-by-side comparison."""

    name: str
    drafter: object
    k: int = 4
    tree: TreeConfig | None = None
    verification: str = "lossless"


def run_compare(target, methods: list[Method], prompts, max_new_tokens, sampling, seed=0, progress=True,
                context_edges: tuple[int, ...] = (64, 128, 256)) -> dict:
    """Plain decoding and every method on the same prompts in one process, interleaved prompt
    by prompt with a rotating order: the fair way to put drafters side by side on a noisy
    machine. Speedups are Spec-Bench's (mean per-prompt tokens/s over plain's)."""
    engines = {"plain": Engine(target)}
    for m in methods:
        if m.name in engines:
            raise ValueError(f"method name {m.name!r} used twice")
        engines[m.name] = Engine(target, m.drafter, m.k, tree=m.tree, verification=m.verification)
    names = list(engines)
    run = {n: (lambda e, s: lambda p, sd: e.generate(p.ids, max_new_tokens, sampling, seed=sd, speculative=s))(e, n != "plain")
           for n, e in engines.items()}
    for n in names:  # warm-up, not recorded
        run[n](prompts[0], seed)
    outputs: dict[str, list[GenerationResult]] = {n: [] for n in names}
    for i, p in enumerate(tqdm(prompts, desc="compare", disable=not progress)):
        for j in range(len(names)):
            n = names[(i + j) % len(names)]
            outputs[n].append(run[n](p, seed + i))
    tps = {n: _mean_tps([(len(r.tokens), r.elapsed_s) for r in outs]) for n, outs in outputs.items()}
    domains = sorted({p.domain for p in prompts})
    rows = {}
    for n in names:
        m, by_domain = SpecMetrics(), {}
        for p, r in zip(prompts, outputs[n]):
            m = m.merge(r.metrics)
            by_domain[p.domain] = by_domain.get(p.domain, SpecMetrics()).merge(r.metrics)
        per_domain = {}
        for d in domains:  # tau and speedup per prompt domain (acceptance drifts with the domain)
            pick = lambda name: [(len(r.tokens), r.elapsed_s) for p, r in zip(prompts, outputs[name]) if p.domain == d]  # noqa: E731
            per_domain[d] = {"mean_acceptance_length": by_domain[d].as_dict()["mean_acceptance_length"],
                             "speedup": _mean_tps(pick(n)) / _mean_tps(pick("plain"))}
        row = {"tokens_per_s": tps[n], "speedup": tps[n] / tps["plain"], **m.as_dict(), "by_domain": per_domain,
               "outputs_match_plain": all(a.tokens == b.tokens for a, b in zip(outputs[n], outputs["plain"])) if sampling.greedy else None}
        if n != "plain":
            row["by_context"] = context_buckets(outputs[n], context_edges)
            e = engines[n]
            costs = e.measure_step_costs(prompts[0].ids)
            row.update(environment(target, e.drafter, e), num_speculative_tokens=e.k, step_costs_s=costs,
                       predicted_speedup=predicted_speedup(m.mean_acceptance_length, costs["t_step"], costs["t_draft_k"], costs["t_verify"]))
        rows[n] = row
    env = environment(target, None)
    env.pop("draft"), env.pop("drafter_kind"), env.pop("tree"), env.pop("verification")
    return {**env, "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p, "seed": seed,
            "max_new_tokens": max_new_tokens, "num_prompts": len(prompts), "methods": rows}


def format_compare(result: dict) -> str:
    lines = [f"target {result['target']}  T={result['temperature']}  {result['dtype']} on {result['hardware']}  "
             f"{result['num_prompts']} prompts x {result['max_new_tokens']} tokens"]
    if result.get("target_note"):
        lines.append(f"note: the target was {result['target_note']}")
    lines.append(f"{'method':<22}{'nodes/step':>11}{'tau':>7}{'accept':>8}{'tokens/s':>10}{'speedup':>9}{'predicted':>10}{'match':>7}  per-position")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for name, r in result["methods"].items():
        per_step = r["drafted_tokens"] / r["drafts"] if r.get("drafts") else 0
        match = {True: "yes", False: "NO", None: "-"}[r["outputs_match_plain"]]
        lines.append(f"{name:<22}{per_step:>11.1f}{r['mean_acceptance_length']:>7.2f}{fmt(r['draft_acceptance_rate'], '.2f'):>8}"
                     f"{r['tokens_per_s']:>10.2f}{r['speedup']:>8.2f}x{fmt(r.get('predicted_speedup'), '.2f'):>9}x{match:>7}  "
                     + " ".join(f"{a:.2f}" for a in r["per_position_acceptance"]))
    domains = sorted({d for r in result["methods"].values() for d in r.get("by_domain", {})})
    if len(domains) > 1:
        lines.append(f"{'by domain (tau / speedup)':<22}" + "".join(f"{d:>18}" for d in domains))
        for name, r in result["methods"].items():
            cells = [r["by_domain"].get(d) for d in domains]
            lines.append(f"{name:<22}" + "".join(f"{c['mean_acceptance_length']:>10.2f} /{c['speedup']:>5.2f}x" if c else f"{'-':>18}" for c in cells))
    return "\n".join(lines)


def format_table(result: dict) -> str:
    """A plain-text table of the methods plus the acceptance summary."""
    tree = result.get("tree")
    shape = f"tree {tree}" if tree else f"k={result['num_speculative_tokens']}"
    lines = [
        f"target {result['target']}  draft {result['draft']}  {shape}  "
        f"T={result['temperature']}  {result['dtype']} on {result['hardware']}",
        f"{'method':<13}{'tokens/s':>10}{'vs plain':>10}{'match':>8}",
    ]
    if result.get("target_note"):
        lines.insert(1, f"note: the target was {result['target_note']}")
    if result.get("verification", "lossless") != "lossless":
        lines.insert(1, f"verification {result['verification']}: NOT lossless, outputs may differ from the target's distribution")
    for name, m in result.get("methods", {}).items():
        match = {True: "yes", False: "NO", None: "-"}[m["outputs_match_plain"]]
        lines.append(f"{name:<13}{m['tokens_per_s']:>10.2f}{m['speedup']:>9.2f}x{match:>8}")
    rate = result["draft_acceptance_rate"]
    lines.append(
        f"mean_acceptance_length {result['mean_acceptance_length']:.2f}   "
        f"draft_acceptance_rate {rate if rate is None else round(rate, 3)}   drafts {result['drafts']}"
    )
    lines.append("per_position_acceptance " + " ".join(f"{a:.2f}" for a in result["per_position_acceptance"]))
    if "speedup" in result:
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
        lines.append(
            f"speedup {fmt(result['speedup'])}   predicted {fmt(result['predicted_speedup'])}   "
            f"vs hf_assisted {fmt(result['speedup_vs_hf_assisted'])}   plain vs hf_plain {fmt(result['plain_vs_hf_plain'])}"
        )
    for d, m in result.get("by_domain", {}).items():
        lines.append(f"  domain {d:<10} mean_acceptance_length {m['mean_acceptance_length']:.2f}  drafts {m['drafts']}")
    return "\n".join(lines)


def write_json(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


def plot_acceptance(results: dict[str, dict], path: str) -> None:
    """Per-position acceptance of one or more runs (label -> result) as a PNG."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, r in results.items():
        acc = r["per_position_acceptance"]
        ax.plot(range(1, len(acc) + 1), acc, marker="o", label=f"{label} (τ={r['mean_acceptance_length']:.2f})")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance (fraction of drafts)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
