"""Sampled decoding against an engine: the same drafter, the same prompts, temperature > 0.

Greedy decoding has an exact contract (crosscheck.py): same outputs, same counts. Sampled decoding
cannot: the two runtimes draw different random numbers. What must agree is the law of acceptance,
so this compares per-position acceptance rates as statistics, with their confidence intervals.

Our runtime is run under the engine's own acceptance rule. vLLM drafts by argmax and scores the
draft one-hot (`draft_sample_method="greedy"`, its default): position j is accepted with the
target's probability of the drafted token, p(x_j), and a rejection resamples from p with x_j
removed. That is exactly our lossless chain verification (Leviathan et al. 2023; Chen et al. 2023)
given a deterministic proposal (`Proposal.probs is None`: q one-hot on x), which `ArgmaxDrafts`
makes of any drafter. Our own lossless rule (drafts sampled from q, accepted with min(1, p/q)) is
reported beside it: that is what the drafter gives where the engine scores draft probabilities.

Statistics. Each prompt is one cluster (steps of one prompt are not independent): a rate is
pooled over the prompts, sum(a_i) / sum(d_i), and its standard error is the ratio estimator's over
prompts, sqrt(n / (n - 1) * sum((a_i - r d_i)^2)) / sum(d_i). Each position's difference is a
z-test at alpha / K (Bonferroni over the K positions); the run agrees when no position differs,
and it states the smallest difference it could have seen (80% power) so that "agrees" on a tiny
sample says how little it means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from draftsmith.infer.metrics import pooled_ratio
from draftsmith.infer.proposal import Proposal, WrappedDrafter
from draftsmith.infer.sampling import SamplingConfig

GREEDY = SamplingConfig()
ALPHA = 0.05
POWER = 0.8
MIN_DRAFTED = 1000  # drafted tokens a side, by default


class ArgmaxDrafts(WrappedDrafter):
    """`inner` drafting by argmax, each token scored one-hot: vLLM's default draft rule."""

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, seq, k, sampling, generator=None, tree=None):
        p = self.inner.propose(seq, k, GREEDY, generator, tree)
        return Proposal(p.tokens, None, tree=p.tree)


@dataclass
class Counts:
    """Per prompt: drafts, accepted tokens, accepted per position (position j accepted means the
    first j+1 drafted tokens were), as vLLM counts them."""

    drafts: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    per_pos: list[list[int]] = field(default_factory=list)

    def add(self, drafts: int, accepted: int, per_pos: list[int]) -> None:
        self.drafts.append(int(drafts))
        self.accepted.append(int(accepted))
        self.per_pos.append([int(x) for x in per_pos])


ratio = pooled_ratio  # a rate over prompts and its standard error, prompts as clusters


def compare(ours: Counts, engine: Counts, k: int, alpha: float = ALPHA, power: float = POWER) -> dict:
    """The per-position comparison, tau on each side with its standard error, and the verdict."""
    z_crit = NormalDist().inv_cdf(1 - alpha / (2 * k))
    z_power = NormalDist().inv_cdf(power)
    positions, agree = [], True
    for j in range(k):
        (ro, so), (re, se) = (ratio([p[j] if j < len(p) else 0 for p in c.per_pos], c.drafts) for c in (ours, engine))
        diff_se = math.hypot(so, se)
        z = (re - ro) / diff_se if diff_se > 0 else (0.0 if re == ro else math.inf)
        differs = abs(z) > z_crit
        agree &= not differs
        positions.append(
            {
                "position": j + 1,
                "ours": ro,
                "engine": re,
                "ours_ci": [ro - z_crit * so, ro + z_crit * so],
                "engine_ci": [re - z_crit * se, re + z_crit * se],
                "z": z,
                "differs": differs,
                "detectable_difference": (z_crit + z_power) * diff_se,
            }
        )
    tau = {}
    for name, c in (("ours", ours), ("engine", engine)):
        r, s = ratio(c.accepted, c.drafts)
        tau[name] = {"mean_acceptance_length": 1 + r, "standard_error": s, "drafts": sum(c.drafts)}
    return {
        "verdict": "agrees" if agree else "differs",
        "alpha": alpha,
        "power": power,
        "positions": positions,
        "tau": tau,
    }


def collect(runtime, prompts, max_new_tokens: int, sampling: SamplingConfig, k: int, min_drafted: int, seed: int = 0):
    """Counts over the prompts, cycled with fresh seeds until `min_drafted` tokens were drafted
    (at most 8 passes): `runtime.generate(ids, n, sampling, seed)` returns an object with drafts,
    draft_tokens, accepted_tokens and accepted_per_pos."""
    counts, drafted, passes = Counts(), 0, 0
    while drafted < min_drafted and passes < 8:
        for i, ids in enumerate(prompts):
            out = runtime.generate(ids, max_new_tokens, sampling, seed + passes * len(prompts) + i)
            counts.add(out.drafts, out.accepted_tokens, list(out.accepted_per_pos)[:k])
            drafted += out.draft_tokens
        passes += 1
    return counts


def format_table(result: dict) -> str:
    lines = [
        "| position | ours | engine | difference | detectable at 80% power | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for p in result["positions"]:
        lines.append(
            f"| {p['position']} | {p['ours']:.3f} | {p['engine']:.3f} | {p['engine'] - p['ours']:+.3f} | "
            f"{p['detectable_difference']:.3f} | {'differs' if p['differs'] else 'same'} |"
        )
    t = result["tau"]
    lines.append(
        f"\nmean_acceptance_length under the engine's rule: ours {t['ours']['mean_acceptance_length']:.3f} "
        f"± {t['ours']['standard_error']:.3f}, engine {t['engine']['mean_acceptance_length']:.3f} "
        f"± {t['engine']['standard_error']:.3f}: {result['verdict']}"
    )
    return "\n".join(lines)


@dataclass
class Sampled:
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: list[int]


class OurSampledRuntime:
    """Our engine decoding sampled, under the engine's rule (`ArgmaxDrafts`) or our lossless one."""

    def __init__(self, target, drafter, k: int, engine_rule: bool = True):
        from draftsmith.infer import Engine

        self.engine = Engine(target, ArgmaxDrafts(drafter) if engine_rule else drafter, k)

    def generate(self, prompt_ids, max_new_tokens: int, sampling: SamplingConfig, seed: int) -> Sampled:
        m = self.engine.generate(prompt_ids, max_new_tokens, sampling, seed=seed).metrics
        return Sampled(m.drafts, m.drafted_tokens, m.accepted_tokens, list(m.accepted_per_position))


class EngineSampledRuntime:
    """A served engine (draftsmith.shipping.engines) asked to sample: its generate() takes
    `sampling` as vLLM's SamplingParams keys."""

    def __init__(self, engine, stop_ids=()):
        self.engine, self.stop_ids = engine, sorted(stop_ids)

    def generate(self, prompt_ids, max_new_tokens: int, sampling: SamplingConfig, seed: int) -> Sampled:
        params = {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k, "seed": seed}
        out = self.engine.generate(prompt_ids, max_new_tokens, self.stop_ids, sampling=params)
        return Sampled(out.drafts, out.draft_tokens, out.accepted_tokens, list(out.accepted_per_pos))


def sampled_agreement(
    target,
    drafter,
    engine_runtime,
    prompts,
    k: int,
    sampling: SamplingConfig,
    max_new_tokens: int,
    min_drafted: int = MIN_DRAFTED,
    alpha: float = ALPHA,
) -> dict:
    """The engine against our runtime under the engine's rule, and our lossless rule's tau beside."""
    if sampling.temperature <= 0:
        raise ValueError("sampled agreement needs a temperature > 0 (greedy has crosscheck's exact contract)")
    ours = collect(OurSampledRuntime(target, drafter, k), prompts, max_new_tokens, sampling, k, min_drafted)
    engine = collect(engine_runtime, prompts, max_new_tokens, sampling, k, min_drafted, seed=10_000)
    lossless = collect(
        OurSampledRuntime(target, drafter, k, engine_rule=False), prompts, max_new_tokens, sampling, k, min_drafted
    )
    result = compare(ours, engine, k, alpha)
    r, s = ratio(lossless.accepted, lossless.drafts)
    result["tau"]["ours_lossless"] = {
        "mean_acceptance_length": 1 + r,
        "standard_error": s,
        "drafts": sum(lossless.drafts),
    }
    result["sampling"] = {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}
    result["k"] = k
    return result


# --- `draftsmith crosscheck --temperature T`: the engine's per-position acceptance against ours ----


def crosscheck_sampled(
    checkpoint,
    engine: str,
    sampling: SamplingConfig,
    prompts_spec: str = "chat,code",
    k: int | None = None,
    max_new_tokens: int = 64,
    num_prompts: int | None = None,
    workdir=None,
    dtype: str = "float32",
    min_drafted: int = MIN_DRAFTED,
    progress: bool = True,
    template_flag: str | None = None,
    vllm=None,
    engine_args: dict | None = None,
) -> dict:
    """The checkpoint's export decoded sampled by `engine` and by our runtime under the engine's
    rule, compared as statistics (module docstring); our lossless rule's tau beside it. Prompts are
    rendered with the chat-template switches the checkpoint trained with (`template_flag`: the
    --chat-template-kwargs JSON instead). `vllm`: which vLLM (--vllm PATH; None: the default);
    `engine_args`: vLLM's own (--vllm-arg)."""
    import inspect
    import pathlib

    from draftsmith.errors import DraftsmithError
    from draftsmith.evaluation.bench import cpu_info
    from draftsmith.evaluation.prompts import chosen_template, load_prompt_sets, template_line, template_switches
    from draftsmith.infer.proposal import default_num_speculative_tokens
    from draftsmith.models import Checkpoint, Target, load_drafter
    from draftsmith.models.sources import resolve_model
    from draftsmith.shipping import crosscheck as cc
    from draftsmith.shipping import engines as engine_drivers

    opened = Checkpoint.open(checkpoint)
    kind = opened.meta["kind"]
    if kind not in cc.ENGINE_KINDS.get(engine, ()):
        raise DraftsmithError(f"{engine} does not serve {kind} drafts")
    if engine == "vllm":  # before loading anything: one line if there is none
        vllm = engine_drivers.resolve_vllm(vllm)
    else:
        engine_drivers.require(engine)
    workdir = pathlib.Path(workdir or opened.path.parent / f"crosscheck-{opened.path.name}")
    workdir.mkdir(parents=True, exist_ok=True)
    target = Target.load(opened.meta["target"], dtype=dtype, device="cpu")
    drafter = cc.full_vocabulary(load_drafter(opened, target))
    k = k or default_num_speculative_tokens(drafter)
    template = chosen_template(template_flag, opened.meta)
    print(template_line(*template), flush=True)
    with template_switches(template[0]):
        prompts = load_prompt_sets(
            prompts_spec, target.tokenizer, num_prompts, target=target, max_new_tokens=max_new_tokens
        )
    ids = [p.ids for p in prompts]
    setup = cc.Setup(
        opened.path,
        kind,
        opened.meta["target"],
        pathlib.Path(resolve_model(opened.meta["target"]).path),
        k,
        workdir,
        dtype,
        {"engine_args": engine_args} if engine_args else {},
        vllm,
    )
    fmt = cc.engine_format(engine)
    max_model_len = max(len(i) for i in ids) + max_new_tokens + k + 8
    plain, spec, info = engine_drivers.driver(engine)(
        setup, lambda **options: cc._export(setup, fmt.name, **options), max_model_len, target.tokenizer
    )
    plain.close()  # sampled agreement compares drafted runs only
    try:
        if "sampling" not in inspect.signature(spec.generate).parameters:
            raise DraftsmithError(f"--temperature: crosscheck samples in vllm only; {engine} decodes greedily here")
        result = sampled_agreement(
            target,
            drafter,
            EngineSampledRuntime(spec, target.eos_token_ids),
            ids,
            k,
            sampling,
            max_new_tokens,
            min_drafted,
        )
    finally:
        spec.close()
    result.update(
        checkpoint=str(opened.path),
        kind=kind,
        target=opened.meta["target"],
        engine=engine,
        engine_info=info,
        prompts=prompts_spec,
        num_prompts=len(ids),
        max_new_tokens=max_new_tokens,
        min_drafted=min_drafted,
        dtype=dtype,
        cpu=cpu_info(),
        chat_template_kwargs=template[0],
        chat_template_kwargs_from=template[1],
    )
    return result


def run(args) -> int:
    """`draftsmith crosscheck`: greedy (the exact contract, crosscheck.py) or, with --temperature > 0,
    the sampled comparison above; exit 1 when the engine differs."""
    from draftsmith.errors import DraftsmithError
    from draftsmith.shipping import crosscheck_cli

    if not args.temperature:
        return crosscheck_cli.run(args)
    if args.device != "cpu":
        raise DraftsmithError("--temperature: the sampled comparison runs our side on the CPU (--device cpu)")
    if args.cpu_matmul != "linear":  # it compares acceptance statistics and times nothing
        raise DraftsmithError(
            "--cpu-matmul times our greedy side; the sampled comparison (--temperature) times nothing"
        )
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if engines != ["vllm"]:
        raise DraftsmithError(
            f"--temperature: crosscheck samples in vllm only (--engines vllm), not {','.join(engines)}"
        )
    try:
        sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    except ValueError as e:
        raise DraftsmithError(str(e)) from None
    if args.min_drafted < 1:
        raise DraftsmithError("--min-drafted must be >= 1")
    result = crosscheck_sampled(
        args.checkpoint,
        "vllm",
        sampling,
        args.prompts,
        args.num_speculative_tokens,
        args.max_new_tokens,
        args.num_prompts,
        args.workdir,
        args.dtype,
        args.min_drafted,
        not args.quiet,
        template_flag=args.chat_template_kwargs,
        vllm=args.vllm,
        engine_args=crosscheck_cli.vllm_engine_args(args.vllm_arg),
    )
    print(format_table(result))
    if args.json:
        from draftsmith.evaluation.report import write_report

        write_report(result, args.json)
        print(f"wrote {args.json}")
    return 0 if result["verdict"] == "agrees" else 1
