#!/usr/bin/env python
"""Predicted vs measured speedup, before and after the fix of the draft's last-row slicing, side by side.

Before: transformers was given `logits_to_keep=1` (an int), so it sliced hidden[:, -1:, :]; on
that strided view torch 2.13's CPU bf16 linear takes a slow path (Qwen2.5-Coder-0.5B's LM head
~700 ms instead of ~20 ms), which a draft LM hit whenever it caught up on 2 tokens (every draft
of the step before kept), and measure_step_costs timed only steps that kept nothing (1 token).
After: the kept rows are gathered (models/target.py `last_rows`) and the drafting step is timed
for every accepted count n and weighted by the run's acceptance (Engine.measure_step_costs).

Per prompt, in rotating order: plain decoding, then for each --draft the drafter "after" and, for
the kinds that asked transformers for the last row (draft_lm, pard), "before" (the int restored).
For each method: τ, measured speedup, the speedup predicted from costs measured alone (the old
way: t_draft of a step that kept nothing; the new way: weighted over n) and from the costs timed
inside the loop, and measured/predicted.

    python scripts/bench_loop_gap.py --target qwen2.5-coder-1.5b-instruct --draft qwen2.5-coder-0.5b-instruct \\
        --dtype bfloat16 -k 4 --prompts humaneval --num-prompts 8 --max-new-tokens 64 --json runs/loop_gap.json
"""

from __future__ import annotations

import contextlib
import statistics

from draftsmith.evaluation.bench import in_loop_times, interleaved
from draftsmith.evaluation.benchkit import (
    COMPARE_FLAGS,
    capped_k,
    comparison,
    decode_settings,
    markdown_table,
    parser,
    run_main,
    save,
)
from draftsmith.evaluation.prompts import load_prompt_sets
from draftsmith.infer.engine import Engine, expected_draft_cost, predicted_speedup
from draftsmith.infer.hardware import cpu_info, format_cpu
from draftsmith.models import Target, draft_lm, load_drafter, pard

PATCHED = {"draft_lm": draft_lm, "pard": pard}  # modules whose drafting asked for the last row as an int


@contextlib.contextmanager
def before_fix(kind: str):
    """The int `logits_to_keep` the drafter passed before the fix (transformers slices)."""
    module = PATCHED.get(kind)
    if module is None:
        yield
        return
    fixed = module.last_rows
    module.last_rows = lambda keep, q, device: 0 if keep <= 0 or keep >= q else keep
    try:
        yield
    finally:
        module.last_rows = fixed


def method_row(engine, kind, results, summary, loop_plain, prompt, max_new_tokens) -> dict:
    """One method's τ, measured speedup and the three predictions (costs measured alone at n=0,
    weighted over n, and timed inside the loop), each with measured/predicted."""
    m = summary["metrics"]
    tau = m.mean_acceptance_length
    with before_fix(kind):
        c = engine.measure_step_costs(
            prompt.ids, per_position_acceptance=m.per_position_acceptance, max_new_tokens=max_new_tokens
        )
    loop = in_loop_times(results)
    measured = summary["speedup"]
    old_draft = c["t_draft_by_accepted"][0]  # what measure_step_costs timed before: a step that kept nothing
    row = {
        "tau": tau,
        "per_position_acceptance": m.per_position_acceptance,
        "speedup": measured,
        "outputs_match_plain": summary["outputs_match"],
        "step_costs_s": c,
        "step_costs_in_loop_s": {"t_step": loop_plain["verify"], **loop},
        "predicted_alone_n0": predicted_speedup(tau, c["t_step"], old_draft, c["t_verify"]),
        "predicted_alone": predicted_speedup(
            tau,
            c["t_step"],
            expected_draft_cost(c["t_draft_by_accepted"], m.per_position_acceptance),
            c["t_verify"],
        ),
        "predicted_in_loop": predicted_speedup(tau, loop_plain["verify"], loop["draft"], loop["verify"]),
    }
    for key in ("predicted_alone_n0", "predicted_alone", "predicted_in_loop"):
        row[f"measured_over_{key}"] = measured / row[key]
    return row


HEAD = [
    "method",
    "tau",
    "speedup",
    "t_step ms",
    "t_draft(n) ms",
    "t_verify ms",
    "in loop: draft/verify ms",
    "predicted n=0 (old)",
    "predicted weighted",
    "predicted in loop",
    "measured/predicted old -> new",
    "same",
]


def table_row(name: str, r: dict) -> list[str]:
    c, t = r["step_costs_s"], r["step_costs_in_loop_s"]
    return [
        name,
        f"{r['tau']:.2f}",
        f"{r['speedup']:.2f}x",
        f"{c['t_step'] * 1e3:.0f}",
        "/".join(f"{x * 1e3:.0f}" for x in c["t_draft_by_accepted"]),
        f"{c['t_verify'] * 1e3:.0f}",
        f"{t['draft'] * 1e3:.0f}/{t['verify'] * 1e3:.0f} (step {t['t_step'] * 1e3:.0f})",
        f"{r['predicted_alone_n0']:.2f}x",
        f"{r['predicted_alone']:.2f}x",
        f"{r['predicted_in_loop']:.2f}x",
        f"{r['measured_over_predicted_alone_n0']:.2f} -> {r['measured_over_predicted_alone']:.2f}",
        "yes" if r["outputs_match_plain"] else "NO",
    ]


def main(argv=None) -> int:
    p = parser(
        __doc__,
        **COMPARE_FLAGS,
        num_speculative_tokens=4,
        prompts="humaneval",
        num_prompts=8,
        max_new_tokens=64,
        json=None,
    )
    args = p.parse_args(argv)

    target = Target.load(args.target, dtype=args.dtype)
    prompts = load_prompt_sets(args.prompts, target.tokenizer, limit=args.num_prompts)
    engines, kinds = {"plain": Engine(target)}, {}
    for spec in args.draft:
        d = load_drafter(spec, target)
        k = capped_k(d, args.num_speculative_tokens)
        engines[f"{spec} after"] = Engine(target, d, k)
        kinds[f"{spec} after"] = None
        if d.kind in PATCHED:
            engines[f"{spec} before"] = Engine(target, d, k)
            kinds[f"{spec} before"] = d.kind
    names = list(engines)

    def run(name, prompt):
        with before_fix(kinds.get(name)):
            return engines[name].generate(prompt.ids, args.max_new_tokens)

    for name in names:  # warm-up, not recorded
        run(name, prompts[0])
    outs = interleaved(lambda name, prompt, i: run(name, prompt), names, prompts, "loop gap")

    summary = comparison(outs)
    plain_tps = summary["plain"]["tokens_per_s"]
    loop_plain = in_loop_times(outs["plain"])
    rows = {}
    for name in names[1:]:
        summary[name]["speedup"] = summary[name]["tokens_per_s"] / plain_tps
        rows[name] = method_row(
            engines[name], kinds[name], outs[name], summary[name], loop_plain, prompts[0], args.max_new_tokens
        )

    cpu = cpu_info()
    print(
        f"{args.target} in {args.dtype}, k={args.num_speculative_tokens}, {len(prompts)} {args.prompts} prompts x "
        f"{args.max_new_tokens} tokens on {format_cpu(cpu)}; plain {plain_tps:.2f} tok/s"
    )
    print(markdown_table(HEAD, [table_row(name, r) for name, r in rows.items()]))
    result = {
        **decode_settings(args, len(prompts)),
        "cpu": cpu,
        "plain_tokens_per_s": plain_tps,
        "plain_step_in_loop_s": statistics.median(x for r in outs["plain"] for x in r.extra["step_times_s"]["verify"]),
        "methods": rows,
    }
    save(result, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
