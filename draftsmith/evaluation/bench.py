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

Where our target runs compiled, both anchors take transformers' static cache and compiled
decode forward (hf_anchors.py); result["baselines"] records what each ran.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
from pathlib import Path

import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.divergence import divergence_line, first_divergence
from draftsmith.evaluation.graph_health import counting
from draftsmith.evaluation.hf_anchors import anchors, anchors_line, configure_hf_assistant, warm_up_assisted
from draftsmith.evaluation.hf_anchors import hf_generate as _hf_generate  # the scripts import both from here
from draftsmith.evaluation.report import stamp, write_json_atomic
from draftsmith.infer.engine import Engine, GenerationResult, predicted_speedup
from draftsmith.infer.hardware import cpu_info, format_cpu  # noqa: F401 (format_cpu: the scripts import it from here)
from draftsmith.infer.metrics import SpecMetrics, pooled_ratio
from draftsmith.infer.tree import TreeConfig
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


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def run_eval(
    target, drafter, prompts, k, max_new_tokens, sampling, seed=0, progress=True, tree=None, verification="lossless"
) -> dict:
    """Acceptance metrics only (no baselines, no timing claims), overall and per category / turn."""
    engine = Engine(target, drafter, k, tree=tree, verification=verification)
    total, results = SpecMetrics(), []
    for i, p in enumerate(tqdm(prompts, desc="eval", disable=not progress)):
        results.append(engine.generate(p.ids, max_new_tokens, sampling, seed=seed + i))
        total = total.merge(results[-1].metrics)
    return {
        **environment(target, drafter, engine),
        "num_speculative_tokens": k,
        "temperature": sampling.temperature,
        "num_prompts": len(prompts),
        **total.as_dict(),
        # tau's standard error over the prompts (each a cluster of steps): what a difference must
        # beat; None where it cannot be estimated (one prompt, nothing drafted)
        "mean_acceptance_length_se": _finite_or_none(
            pooled_ratio([r.metrics.accepted_tokens for r in results], [r.metrics.drafts for r in results])[1]
        ),
        **breakdown(prompts, results),  # no baseline ran: acceptance only, no speedup
    }


def run_bench(
    target,
    drafter,
    prompts,
    k,
    max_new_tokens,
    sampling,
    seed=0,
    baselines=("hf_plain", "hf_assisted"),
    progress=True,
    tree=None,
    verification="lossless",
    adaptive_k: int | None = None,
    hf_fast: bool | None = None,
) -> dict:
    """Plain vs speculative decoding (ours) plus the transformers `baselines` named, interleaved.

    adaptive_k: K's ceiling for an adaptive engine (infer/adaptive.py), which is then the
    "speculative" method, run beside the fixed-K engine ("speculative_fixed_k") in the same run;
    the speed model's prediction is a fixed K's, so it is reported for that one.
    hf_fast: the anchors on transformers' static cache and compiled forward (default: where our
    target runs compiled; hf_anchors.py)."""
    if adaptive_k and drafter is None:
        raise DraftsmithError(
            f"adaptive_k={adaptive_k!r}: adaptive K chooses how many tokens a draft proposes, it needs a drafter"
        )
    engine = Engine(target, drafter, k, tree=tree, verification=verification)
    adaptive = (
        Engine(target, drafter, adaptive_k, tree=tree, verification=verification, adaptive=True)
        if adaptive_k and drafter is not None
        else None
    )
    assistant = drafter.as_assistant_model() if drafter is not None else None
    if assistant is not None:
        configure_hf_assistant(assistant, k)
    eos, pad = target.eos_token_ids, target.tokenizer.pad_token_id
    pad = pad if pad is not None else min(eos)

    def ours(speculative, e=engine):
        return lambda p, s: e.generate(p.ids, max_new_tokens, sampling, seed=s, speculative=speculative)

    how = anchors(target, prompts, max_new_tokens, hf_fast)

    def hf(assistant_model, a):
        def run(p, s):
            toks, secs = _hf_generate(target.model, p.ids, max_new_tokens, sampling, eos, pad, s, assistant_model, a)
            return GenerationResult(toks, [], "", SpecMetrics(), secs, 0, len(p.ids))

        return run

    methods = {"plain": ours(False), "speculative": ours(True, adaptive or engine)}
    if adaptive is not None:
        methods["speculative_fixed_k"] = ours(True)
    if "hf_plain" in baselines:
        methods["hf_plain"] = hf(None, how["hf_plain"])
    if "hf_assisted" in baselines and assistant is not None:
        methods["hf_assisted"] = hf(assistant, how["hf_assisted"])
    names = list(methods)
    ran = {n: how[n].as_dict() for n in names if n in how}

    outputs: dict[str, list] = {n: [] for n in names}
    try:
        for name in names:  # warm-up: allocator, kernels, lazy init, compiles; not recorded
            methods[name](prompts[0], seed)
        if "hf_assisted" in methods:  # compiled: every verify length the timed runs may meet
            warm_up_assisted(target.model, assistant, prompts[0].ids, k, max_new_tokens, sampling, eos, pad, seed,
                             how["hf_assisted"])  # fmt: skip
        with counting() as graphs:  # compiles, breaks and CUDA-graph skips while timed: 0 when healthy
            interleaved(lambda name, p, i: methods[name](p, seed + i), names, prompts, "bench", progress, into=outputs)
    except KeyboardInterrupt:  # Ctrl-C: hand back the runs that finished, marked partial
        partial = {
            **environment(target, drafter, engine),
            "num_speculative_tokens": k,
            "temperature": sampling.temperature,
            "seed": seed,
            "max_new_tokens": max_new_tokens,
            "baselines": ran,
            "partial": _partial(outputs, len(prompts)),
        }
        raise BenchInterrupted(partial) from None

    spec = outputs["speculative"]
    fixed_name = "speculative" if adaptive is None else "speculative_fixed_k"
    metrics, fixed = SpecMetrics(), SpecMetrics()
    for r in spec:
        metrics = metrics.merge(r.metrics)
    for r in outputs[fixed_name]:
        fixed = fixed.merge(r.metrics)
    tps = {n: _mean_tps([(len(r.tokens), r.elapsed_s) for r in outs]) for n, outs in outputs.items()}
    costs = engine.measure_step_costs(
        prompts[0].ids, per_position_acceptance=fixed.per_position_acceptance, max_new_tokens=max_new_tokens
    )
    tau = fixed.mean_acceptance_length
    loop = {n: in_loop_times(outs) for n, outs in outputs.items()}
    predicted = predicted_speedup(tau, costs["t_step"], costs["t_draft_k"], costs["t_verify"])
    in_loop = _in_loop_prediction(tau, loop.get("plain"), loop.get(fixed_name))

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
        "predicted_speedup": predicted if adaptive is None else None,
        "plain_vs_hf_plain": ratio("plain", "hf_plain"),
        "baselines": ran,  # the transformers anchors' cache and compile
        "greedy_outputs_match": same("speculative", "plain") if sampling.greedy else None,
        "step_costs_s": costs,
        "graphs_after_warmup": graphs,
        **(in_loop if adaptive is None else {}),
        **breakdown(prompts, spec, outputs["plain"]),  # the speculative method's, speedup vs plain per group
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
    if sampling.greedy and not result["greedy_outputs_match"]:  # where, and how near a tie it was
        result["first_divergence"] = first_divergence(target, prompts, outputs["plain"], spec)
    if adaptive is not None:  # what the policy chose, and the fixed K it ran beside
        result["num_speculative_tokens"] = adaptive.k
        result["adaptive_k"] = adaptive_summary(spec)
        result["fixed_k"] = {
            "num_speculative_tokens": k,
            **fixed.as_dict(),
            "tokens_per_s": tps[fixed_name],
            "speedup": ratio(fixed_name, "plain"),
            "predicted_speedup": predicted,
            **in_loop,
        }
    return result


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


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a bench: `result` holds what the runs that finished measured (partial)."""

    def __init__(self, result: dict):
        super().__init__("bench interrupted")
        self.result = result


def _partial(outputs: dict[str, list], num_prompts: int) -> dict:
    """What the finished runs of an interrupted bench measured: per method its runs, tokens/s and
    (speculative) acceptance; no speedup, as the methods did not all run on the same prompts."""
    done = sum(len(v) for v in outputs.values())
    methods = {}
    for name, outs in outputs.items():
        m = SpecMetrics()
        for r in outs:
            m = m.merge(r.metrics)
        methods[name] = {
            "runs": len(outs),
            "tokens_per_s": _mean_tps([(len(r.tokens), r.elapsed_s) for r in outs]),
            "generated_tokens": sum(len(r.tokens) for r in outs),
            **(m.as_dict() if name == "speculative" else {}),
        }
    return {
        "runs_done": done,
        "runs_total": num_prompts * len(outputs),
        "note": "interrupted: only the runs that finished; no speedup (the methods ran on different prompts)",
        "methods": methods,
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


@dataclasses.dataclass
class Method:
    """One speculative configuration in a side-by-side comparison."""

    name: str
    drafter: object
    k: int | None = None  # None: the drafter's default K (its kind's default_k)
    tree: TreeConfig | None = None
    verification: str = "lossless"
    adaptive: bool = False  # K chosen per step in 0..k (k None: the drafter's ceiling; infer/adaptive.py)


def run_compare(
    target,
    methods: list[Method],
    prompts,
    max_new_tokens,
    sampling,
    seed=0,
    progress=True,
    context_edges: tuple[int, ...] = (64, 128, 256),
) -> dict:
    """Plain decoding and every method on the same prompts in one process, interleaved prompt
    by prompt with a rotating order: the fair way to put drafters side by side on a noisy
    machine. Speedups are Spec-Bench's (mean per-prompt tokens/s over plain's)."""
    engines = {"plain": Engine(target)}
    for m in methods:
        if m.name in engines:
            raise ValueError(f"method name {m.name!r} used twice")
        engines[m.name] = Engine(target, m.drafter, m.k, tree=m.tree, verification=m.verification, adaptive=m.adaptive)
    names = list(engines)
    run = {
        n: (lambda e, s: lambda p, sd: e.generate(p.ids, max_new_tokens, sampling, seed=sd, speculative=s))(
            e, n != "plain"
        )
        for n, e in engines.items()
    }
    for n in names:  # warm-up, not recorded
        run[n](prompts[0], seed)
    with counting() as graphs:  # compiles, breaks and CUDA-graph skips while timed: 0 when healthy
        outputs = interleaved(lambda n, p, i: run[n](p, seed + i), names, prompts, "compare", progress)
    tps = {n: _mean_tps([(len(r.tokens), r.elapsed_s) for r in outs]) for n, outs in outputs.items()}
    in_loop = {n: in_loop_times(outs) for n, outs in outputs.items()}
    rows = {}
    for n in names:
        m = SpecMetrics()
        for r in outputs[n]:
            m = m.merge(r.metrics)
        # tau, acceptance and speedup per category (and per MT-Bench turn, per set): the papers' table
        row = {
            "tokens_per_s": tps[n],
            "speedup": tps[n] / tps["plain"],
            **m.as_dict(),
            **breakdown(prompts, outputs[n], outputs["plain"]),
            "outputs_match_plain": all(a.tokens == b.tokens for a, b in zip(outputs[n], outputs["plain"]))
            if sampling.greedy
            else None,
        }
        if n != "plain" and engines[n].adaptive:  # no fixed K: what it chose, no speed-model prediction
            row.update(
                environment(target, engines[n].drafter, engines[n]),
                num_speculative_tokens=engines[n].k,
                adaptive_k=adaptive_summary(outputs[n]),
            )
        elif n != "plain":
            row["by_context"] = context_buckets(outputs[n], context_edges)
            e = engines[n]
            costs = e.measure_step_costs(
                prompts[0].ids, per_position_acceptance=m.per_position_acceptance, max_new_tokens=max_new_tokens
            )
            row.update(
                environment(target, e.drafter, e),
                num_speculative_tokens=e.k,
                step_costs_s=costs,
                predicted_speedup=predicted_speedup(
                    m.mean_acceptance_length, costs["t_step"], costs["t_draft_k"], costs["t_verify"]
                ),
            )
            row.update(_in_loop_prediction(m.mean_acceptance_length, in_loop["plain"], in_loop[n]))
        rows[n] = row
    env = environment(target, None)
    for key in ("draft", "drafter_kind", "draft_vocab_size", "tree", "verification", "draft_checkpoint"):
        env.pop(key)  # per method, in its row
    return {
        **env,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "num_prompts": len(prompts),
        "graphs_after_warmup": graphs,
        "methods": rows,
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


def time_split_line(row: dict) -> str:
    """Where a generation's time went, plain vs speculative: the decode steps (what the speed model
    predicts) and the rest (prefill, stop checks, host work), and the decode phase's own speedup."""
    sp = row["time_split_s"]
    p, s = sp["plain"], sp["speculative"]
    return (
        f"per generation: plain {p['in_steps']:.2f} s in steps + {p['outside_steps']:.2f} s outside (prefill, host); "
        f"speculative {s['in_steps']:.2f} s + {s['outside_steps']:.2f} s; "
        f"decode-phase speedup {row['speedup_decode']:.2f}x"
    )


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


def format_compare(result: dict) -> str:
    lines = [
        f"target {result['target']}  T={result['temperature']}  {result['dtype']} on {result['hardware']}  "
        f"{result['num_prompts']} prompts x {result['max_new_tokens']} tokens"
    ]
    if result.get("target_note"):
        lines.append(f"note: the target was {result['target_note']}")
    lines.append(
        f"{'method':<22}{'nodes/step':>11}{'tau':>7}{'accept':>8}{'tokens/s':>10}"
        f"{'speedup':>9}{'predicted':>10}{'match':>7}  per-position"
    )
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for name, r in result["methods"].items():
        per_step = r["drafted_tokens"] / r["drafts"] if r.get("drafts") else 0
        match = {True: "yes", False: "NO", None: "-"}[r["outputs_match_plain"]]
        lines.append(
            f"{name:<22}{per_step:>11.1f}{r['mean_acceptance_length']:>7.2f}{fmt(r['draft_acceptance_rate'], '.2f'):>8}"
            f"{r['tokens_per_s']:>10.2f}{r['speedup']:>8.2f}x{fmt(r.get('predicted_speedup'), '.2f'):>9}x{match:>7}  "
            + " ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
        )
    for name, r in result["methods"].items():  # adaptive K: how often each K was drafted (0: a plain step)
        if r.get("adaptive_k"):
            chosen = ", ".join(f"K={k} x{n}" for k, n in r["adaptive_k"]["k_counts"].items())
            lines.append(f"{name}: adaptive K in 0..{r['adaptive_k']['k_max']}, steps {chosen}")
    costed = {n: r for n, r in result["methods"].items() if r.get("step_costs_s")}
    if costed:  # the same step costs measured alone (measure_step_costs) and inside the loop
        lines.append(
            f"{'step costs, x a decode step':<28}{'draft alone':>12}{'in loop':>9}{'verify alone':>13}{'in loop':>9}"
            f"{'predicted alone':>16}{'in loop':>9}{'measured':>10}{'decode':>9}"
        )
        for name, r in costed.items():
            c, t = r["step_costs_s"], r.get("step_costs_in_loop_s")
            loop = (lambda key: f"{t[key] / t['t_step']:.2f}x") if t else (lambda key: "-")
            lines.append(
                f"{name:<28}{c['t_draft_k'] / c['t_step']:>11.2f}x{loop('t_draft'):>9}"
                f"{c['t_verify'] / c['t_step']:>12.2f}x"
                f"{loop('t_verify'):>9}{r['predicted_speedup']:>15.2f}x"
                f"{(format(r['predicted_speedup_in_loop'], '.2f') + 'x') if t else '-':>9}{r['speedup']:>9.2f}x"
                f"{(format(r['speedup_decode'], '.2f') + 'x') if t else '-':>9}"
            )
    lines += group_table(result["methods"])
    return "\n".join(lines)


GROUP_FIELDS = ("by_domain", "by_set", "by_turn")


def group_columns(rows: dict) -> list[tuple[str, str]]:
    """(field, group) columns over all methods: categories in order of appearance, then sets and
    turns; a set that is also a category (HumanEval's one) is shown once."""
    cols = [(f, g) for f in GROUP_FIELDS for g in dict.fromkeys(g for r in rows.values() for g in r.get(f, {}))]
    return [(f, g) for f, g in cols if not (f == "by_set" and ("by_domain", g) in cols)]


def group_table(rows: dict) -> list[str]:
    """Methods x (categories, sets, turns, overall): τ / speedup per cell, as the EAGLE and
    SpecForge papers lay out MT-Bench. Nothing when there is only one category."""
    cols = group_columns(rows)
    if len(cols) < 2:
        return []
    cell = lambda c: (
        "-"
        if c is None
        else f"{c['mean_acceptance_length']:.2f}" + (f" /{c['speedup']:.2f}x" if c.get("speedup") is not None else "")
    )  # noqa: E731
    width = max(13, *(len(g) + 1 for _, g in cols))
    lines = [f"{'by domain: tau / speedup':<26}" + "".join(f"{g:>{width}}" for _, g in cols) + f"{'overall':>{width}}"]
    for name, r in rows.items():
        lines.append(
            f"{name:<26}" + "".join(f"{cell(r.get(f, {}).get(g)):>{width}}" for f, g in cols) + f"{cell(r):>{width}}"
        )
    return lines


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
    if result.get("placement"):
        lines.insert(1, placement_line(result["placement"]))
    if result.get("verification", "lossless") != "lossless":
        lines.insert(
            1, f"verification {result['verification']}: NOT lossless, outputs may differ from the target's distribution"
        )
    for name, m in result.get("methods", {}).items():
        match = {True: "yes", False: "NO", None: "-"}[m["outputs_match_plain"]]
        lines.append(f"{name:<13}{m['tokens_per_s']:>10.2f}{m['speedup']:>9.2f}x{match:>8}")
    if result.get("baselines"):
        lines.append(anchors_line(result["baselines"]))
    if result.get("first_divergence"):
        lines.append(divergence_line(result["first_divergence"]))
    rate = result["draft_acceptance_rate"]
    lines.append(
        f"mean_acceptance_length {result['mean_acceptance_length']:.2f}   "
        f"draft_acceptance_rate {rate if rate is None else round(rate, 3)}   drafts {result['drafts']}"
    )
    lines.append("per_position_acceptance " + " ".join(f"{a:.2f}" for a in result["per_position_acceptance"]))
    if result.get("adaptive_k"):
        a, f = result["adaptive_k"], result["fixed_k"]
        chosen = ", ".join(f"K={key} x{n}" for key, n in a["k_counts"].items())
        lines.append(f"adaptive K (0..{a['k_max']}; K=0: a plain step), steps: {chosen}")
        lines.append(
            f"fixed K={f['num_speculative_tokens']} beside it: mean_acceptance_length {f['mean_acceptance_length']:.2f}"
            f"  speedup {f['speedup']:.2f}x  predicted {f['predicted_speedup']:.2f}x"
        )
    if "speedup" in result:
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
        lines.append(
            f"speedup {fmt(result['speedup'])}   predicted {fmt(result['predicted_speedup'])}   "
            f"vs hf_assisted {fmt(result['speedup_vs_hf_assisted'])}   plain vs hf_plain "
            f"{fmt(result['plain_vs_hf_plain'])}"
        )
    c, t = result.get("step_costs_s"), result.get("step_costs_in_loop_s")
    if c and "t_draft_k" in c:  # alone (measure_step_costs) vs as the loop ran them, in ms
        ms = lambda v: f"{v * 1e3:.1f}"  # noqa: E731
        lines.append(
            f"step costs alone: t_step {ms(c['t_step'])} ms  t_draft {ms(c['t_draft_k'])} ms  t_verify "
            f"{ms(c['t_verify'])} ms"
            + (
                f"   in loop: {ms(t['t_step'])} / {ms(t['t_draft'])} / {ms(t['t_verify'])} ms, predicted "
                f"{fmt(result['predicted_speedup_in_loop'])}"
                if t
                else ""
            )
        )
    if result.get("time_split_s"):
        lines.append(time_split_line(result))
    graphs = result.get("graphs_after_warmup")
    compiled = result.get("compiled") or any(a["compiled"] for a in (result.get("baselines") or {}).values())
    if graphs and (compiled or any(graphs.values())):  # eager and healthy: nothing to say
        lines.append(graphs_line(graphs))
    for role, c in (result.get("cpu_matmul") or {}).items():  # what --cpu-matmul / --draft-dtype chose, and why
        lines.append(f"{role}: {c.get('kernel') or c.get('dtype')} ({c['why']})")
    for field in GROUP_FIELDS:
        for g, m in result.get(field, {}).items():
            rate, speed = m["draft_acceptance_rate"], m.get("speedup")
            lines.append(
                f"  {field[3:]:<6} {g:<11} mean_acceptance_length {m['mean_acceptance_length']:.2f}  "
                f"draft_acceptance_rate {'n/a' if rate is None else f'{rate:.3f}'}  drafts {m['drafts']}"
                + ("" if speed is None else f"  speedup {speed:.2f}x")
                + "  per_position "
                + " ".join(f"{a:.2f}" for a in m["per_position_acceptance"])
            )
    return "\n".join(lines)


def placement_line(placement: dict) -> str:
    """A target split over devices: its layers per device and what that means for the figures."""
    split = ", ".join(f"{d} {n} layers" for d, n in placement["layers_per_device"].items())
    return f"placement: {split}; {placement['caveat']}"


def graphs_line(graphs: dict) -> str:
    """The graph counters of the timed runs; anything but zeros means the compiled path was not
    what was measured (a recompile or a re-record inside the timing, or an eager fallback)."""
    cells = "  ".join(f"{k} {v}" for k, v in graphs.items())
    return f"graphs after warm-up: {cells}" + ("" if not any(graphs.values()) else "   (not all 0: see torch's log)")


def write_json(result: dict, path: str) -> None:
    """`result` as indented JSON, its folder made (`--json runs/x.json` on a fresh clone), written
    atomically: a reader (or a resumed run) sees the old file or the new one, never half."""
    write_json_atomic(result, path)


PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def check_output_path(path: str, flag: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Before any work (issue 16): refuse, in one line, an output path that cannot be written, so
    a finished run is never lost to it. Missing folders are fine (created when writing)."""
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise DraftsmithError(f"{flag} {path}: name a {' / '.join(suffixes)} file")
    if p.is_dir():
        raise DraftsmithError(
            f"{flag} {path} is a directory: name a file in it, e.g. {p / ('result' + (suffixes or ('.json',))[0])}"
        )
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise DraftsmithError(f"{flag} {path}: {folder} is a file, not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise DraftsmithError(f"{flag} {path}: the file is read-only")
    try:
        with tempfile.TemporaryFile(dir=folder):  # the only sure test (root passes os.access, read-only mounts do not)
            pass
    except OSError as e:
        raise DraftsmithError(
            f"{flag} {path}: cannot write in {folder} ({e.strerror or e}); pick a writable folder"
        ) from None


def save_outputs(result: dict, json_path: str | None, plot_path: str | None, label: str) -> list[str]:
    """Write the JSON and the plot; the paths written. Whatever fails, the results are kept: a
    JSON that cannot be written where asked goes to a temporary file, and the one error names it."""
    written, problems = [], []
    if json_path:
        try:
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            write_json(stamp(result), json_path)  # machine, commit, date, command: as every benchmark's JSON
            written.append(json_path)
        except OSError as e:
            problems.append(f"could not write --json {json_path} ({e.strerror or e})")
    if plot_path:
        try:
            Path(plot_path).parent.mkdir(parents=True, exist_ok=True)
            plot_acceptance({label: result}, plot_path)
            written.append(plot_path)
        except (OSError, ValueError) as e:  # ValueError: a format matplotlib cannot write
            problems.append(f"could not write --plot {plot_path} ({getattr(e, 'strerror', None) or e})")
    if problems:
        kept = json_path if json_path in written else None
        if kept is None:
            fd, kept = tempfile.mkstemp(prefix="draftsmith-results-", suffix=".json")
            os.close(fd)
            write_json(result, kept)
        raise DraftsmithError(f"{'; '.join(problems)}; the results are saved in {kept}")
    return written


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
