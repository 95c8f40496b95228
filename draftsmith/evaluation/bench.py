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

The figures drawn from the runs are in bench_measures.py, the tables and result files in
bench_report.py; their names stay importable from here, the module the commands, the scripts
and the docs name.
"""

from __future__ import annotations

import dataclasses
import math

from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.bench_measures import (
    _in_loop_prediction,
    _mean_tps,
    adaptive_summary,
    breakdown,
    context_buckets,
    environment,
    in_loop_times,
    interleaved,
)
from draftsmith.evaluation.bench_report import (  # noqa: F401 (importable from here)
    GROUP_FIELDS,
    PLOT_SUFFIXES,
    check_output_path,
    format_compare,
    format_table,
    graphs_line,
    group_columns,
    group_table,
    placement_line,
    plot_acceptance,
    save_outputs,
    time_split_line,
    write_json,
)
from draftsmith.evaluation.divergence import first_divergence
from draftsmith.evaluation.graph_health import counting
from draftsmith.evaluation.hf_anchors import anchors, configure_hf_assistant, warm_up_assisted
from draftsmith.evaluation.hf_anchors import hf_generate as _hf_generate  # the scripts import both from here
from draftsmith.infer.engine import Engine, GenerationResult, predicted_speedup
from draftsmith.infer.hardware import cpu_info, format_cpu  # noqa: F401 (the scripts import them from here)
from draftsmith.infer.metrics import SpecMetrics, paired_ratio_difference, pooled_ratio
from draftsmith.infer.tree import TreeConfig


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def tau_se(results) -> float | None:
    """τ's standard error over the prompts (each a cluster of steps): what a difference must beat;
    None where it cannot be estimated (one prompt, nothing drafted)."""
    return _finite_or_none(
        pooled_ratio([r.metrics.accepted_tokens for r in results], [r.metrics.drafts for r in results])[1]
    )


def tau_difference(result: dict, a: str, b: str) -> dict:
    """τ of method `a` minus τ of method `b` from one run_compare result, with the standard error
    of the difference paired over the prompts both decoded (each prompt a cluster). A difference
    under two standard errors is no difference."""
    rows = result["methods"]
    pa, pb = rows[a]["per_prompt_acceptance"], rows[b]["per_prompt_acceptance"]
    diff, se = paired_ratio_difference([x for x, _ in pa], [d for _, d in pa], [x for x, _ in pb], [d for _, d in pb])
    se = _finite_or_none(se)
    return {
        "a": a,
        "b": b,
        "num_prompts": len(pa),
        "difference": _finite_or_none(diff),
        "se": se,
        "z": None if not se else diff / se,
        "beyond_two_se": None if se is None else abs(diff) > 2 * se,
    }


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
        "mean_acceptance_length_se": tau_se(results),
        # (accepted tokens, drafts) per prompt, in prompt order: two drafts' τ paired over them
        "per_prompt_acceptance": [[r.metrics.accepted_tokens, r.metrics.drafts] for r in results],
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
        **_settings(sampling, seed, max_new_tokens, prompts),
        **metrics.as_dict(),
        "mean_acceptance_length_se": tau_se(spec),
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
            "mean_acceptance_length_se": tau_se(outputs[fixed_name]),
            "tokens_per_s": tps[fixed_name],
            "speedup": ratio(fixed_name, "plain"),
            "predicted_speedup": predicted,
            **in_loop,
        }
    return result


def _settings(sampling, seed, max_new_tokens, prompts) -> dict:
    """What a timed run decoded under, as its result records it."""
    return {
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "seed": seed,
        "max_new_tokens": max_new_tokens,
        "num_prompts": len(prompts),
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
            "mean_acceptance_length_se": tau_se(outputs[n]),
            # (accepted tokens, drafts) per prompt, in prompt order: what tau_difference pairs
            "per_prompt_acceptance": [[r.metrics.accepted_tokens, r.metrics.drafts] for r in outputs[n]],
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
        **_settings(sampling, seed, max_new_tokens, prompts),
        "graphs_after_warmup": graphs,
        "methods": rows,
    }
