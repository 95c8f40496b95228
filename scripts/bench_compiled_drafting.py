#!/usr/bin/env python
"""Eager vs compiled drafting, per drafter, side by side in one run.

The target stays eager throughout; only the drafter's decode forwards are compiled
(`compile_decode`: torch.compile with CUDA graphs on a GPU, inductor's C++ code on a CPU). Each
--draft is loaded twice, eager and compiled; the compiled copy's caches are sized as for a
compiled target (CACHE_BUCKET steps), so one set of graphs serves every prompt. Per prompt, in
rotating order: plain decoding, each drafter eager and compiled. Reported per drafter: the
drafting time per step inside the loop (propose + accept), the verify time, tokens/s, speedup
over plain, whether outputs and acceptance agree between eager and compiled, and the seconds
the warm-up spent compiling.

    python scripts/bench_compiled_drafting.py --draft runs/smollm2-eagle3-8min/final \\
        --draft runs/smollm2-dflash-8min/final --dtype bfloat16 -k 3 --json runs/compiled_drafting.json
"""

from __future__ import annotations

import contextlib
import sys
import time

from draftsmith.evaluation.bench import in_loop_times, interleaved
from draftsmith.evaluation.benchkit import (
    COMPARE_FLAGS,
    add_flags,
    capped_k,
    comparison,
    decode_settings,
    markdown_table,
    parser,
    run_main,
    save,
)
from draftsmith.evaluation.prompts import load_prompt_sets
from draftsmith.infer.engine import Engine
from draftsmith.infer.hardware import cpu_info, format_cpu
from draftsmith.infer.tree import TreeConfig
from draftsmith.models import Target, load_drafter


@contextlib.contextmanager
def compiled_flag(target, on: bool):
    """What drafters and the engine read to decide on compiling and on bucketed cache sizes.
    The target's own forward was bound (eager) when it was loaded and does not change."""
    old = target.compiled
    target.compiled = on
    try:
        yield
    finally:
        target.compiled = old


def build(target, specs: list[str], k: int, tree: TreeConfig | None) -> tuple[dict, dict]:
    """Plain decoding, then each drafter loaded twice, eager and compiled: name -> Engine, and
    name -> whether it is the compiled copy."""
    engines, compiled = {"plain": Engine(target)}, {}
    for spec in specs:
        for mode in ("eager", "compiled"):
            with compiled_flag(target, mode == "compiled"):
                d = load_drafter(spec, target)
            shape = tree if tree is not None and d.supports_trees else None
            name = f"{d.kind}{' tree' if shape else ''} {mode}"
            engines[name] = Engine(target, d, capped_k(d, k), tree=shape)
            compiled[name] = mode == "compiled"
    for engine in engines.values():
        # On CUDA the engine times steps only when asked (it synchronises every step then): the
        # in-loop split is this bench's figure. On a CPU it always times them.
        engine.time_steps = True
    return engines, compiled


def ratio(a, b):
    return a / b if a is not None and b else None


def rows_of(outs: dict, summary: dict, compiled: dict, warmup_s: dict) -> dict:
    """Per drafter: drafting and verify time in the loop, τ, speed, warm-up; each compiled copy
    also against its eager twin."""
    rows = {}
    for name in list(outs)[1:]:
        m, loop = summary[name]["metrics"], in_loop_times(outs[name]) or {}  # {}: untimed, figures None
        rows[name] = {
            "compiled": compiled[name],
            "tau": m.mean_acceptance_length,
            "tokens_per_s": summary[name]["tokens_per_s"],
            "speedup": summary[name]["tokens_per_s"] / summary["plain"]["tokens_per_s"],
            "draft_s": loop.get("draft"),
            "verify_s": loop.get("verify"),
            "warmup_s": warmup_s[name],
            "accepted_tokens": m.accepted_tokens,
            "drafts": m.drafts,
            "outputs_match_plain": summary[name]["outputs_match"],
        }
    for name, row in rows.items():  # the compiled copy against its eager twin
        if row["compiled"]:
            twin = rows[name.removesuffix(" compiled") + " eager"]
            row["draft_over_eager"] = ratio(row["draft_s"], twin["draft_s"])
            row["same_acceptance_as_eager"] = (row["accepted_tokens"], row["drafts"]) == (
                twin["accepted_tokens"],
                twin["drafts"],
            )
    return rows


HEAD = [
    "drafter",
    "draft ms/step",
    "compiled/eager",
    "verify ms",
    "tau",
    "tok/s",
    "speedup",
    "warm-up s",
    "same acceptance",
    "output = plain",
]


def ms(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f}"


def table_row(name: str, r: dict) -> list[str]:
    over = r.get("draft_over_eager")
    same = ("yes" if r["same_acceptance_as_eager"] else "NO") if r["compiled"] else ""
    return [
        name,
        ms(r["draft_s"]),
        ("n/a" if over is None else f"{over:.2f}x") if r["compiled"] else "",
        ms(r["verify_s"]),
        f"{r['tau']:.2f}",
        f"{r['tokens_per_s']:.1f}",
        f"{r['speedup']:.2f}x",
        f"{r['warmup_s']:.0f}",
        same,
        "yes" if r["outputs_match_plain"] else "NO",
    ]


def main(argv=None) -> int:
    p = parser(
        __doc__,
        **COMPARE_FLAGS,
        device=None,
        num_speculative_tokens=3,
    )
    p.add_argument("--tree", default=None, help="topk,depth,num_draft_tokens: also draft EAGLE-2/Medusa trees")
    add_flags(p, prompts="chat,code", num_prompts=8, max_new_tokens=48, json=None)
    args = p.parse_args(argv)

    target = Target.load(args.target, dtype=args.dtype, device=args.device, compile=False)
    prompts = load_prompt_sets(args.prompts, target.tokenizer, limit=args.num_prompts)
    tree = None
    if args.tree:
        topk, depth, nodes = map(int, args.tree.split(","))
        tree = TreeConfig(topk=topk, depth=depth, num_draft_tokens=nodes)
    engines, compiled = build(target, args.draft, args.num_speculative_tokens, tree)

    def run(name, prompt):
        with compiled_flag(target, compiled.get(name, False)):
            return engines[name].generate(prompt.ids, args.max_new_tokens)

    warmup_s = {}
    for name in engines:  # compiles here; a second prompt length proves no shape follows the context
        t0 = time.perf_counter()
        for prompt in prompts[:2]:
            run(name, prompt)
        warmup_s[name] = time.perf_counter() - t0
        print(f"warm-up {name}: {warmup_s[name]:.1f} s", file=sys.stderr)
    outs = interleaved(lambda name, prompt, i: run(name, prompt), list(engines), prompts, "compiled drafting")
    summary = comparison(outs)
    rows = rows_of(outs, summary, compiled, warmup_s)

    cpu = cpu_info()
    plain_tps = summary["plain"]["tokens_per_s"]
    plain_step = (in_loop_times(outs["plain"]) or {}).get("verify")
    print(
        f"{args.target} in {args.dtype} (target eager), k={args.num_speculative_tokens}, {len(prompts)} {args.prompts} "
        f"prompts x {args.max_new_tokens} tokens on "
        f"{format_cpu(cpu) if target.device.type == 'cpu' else target.device}; "
        f"plain {plain_tps:.2f} tok/s, {ms(plain_step)} ms a step"
    )
    print(markdown_table(HEAD, [table_row(name, r) for name, r in rows.items()]))
    result = {
        **decode_settings(args, len(prompts)),
        "device": str(target.device),
        "tree": args.tree,
        "cpu": cpu,
        "plain_tokens_per_s": plain_tps,
        "plain_step_in_loop_s": plain_step,
        "methods": rows,
    }
    save(result, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
