#!/usr/bin/env python
"""The drafter kinds side by side for Qwen2.5-Coder-1.5B-Instruct on this machine: each trained by
draftsmith for the same wall-clock budget (configs/qwen2.5-coder-1.5b-instruct/<kind>.yaml), the
untrained Qwen2.5-Coder-0.5B-Instruct draft at several fixed K, a useless draft (the target's
first layer), plain decoding, and every drafter with adaptive K, in ONE run: the methods are
interleaved prompt by prompt (run_compare), greedy, each output checked equal to plain's.

    bash scripts/install_qwen.sh
    for kind in eagle3 draft_lm_chat dflash; do
      draftsmith train configs/qwen2.5-coder-1.5b-instruct/$kind.yaml --output-dir runs/qwen-coder-$kind
    done
    python scripts/bench_qwen_kinds.py \\
        --runs eagle3=runs/qwen-coder-eagle3,draft_lm=runs/qwen-coder-draft_lm_chat,dflash=runs/qwen-coder-dflash \\
        --out results/qwen-kinds

A trained draft LM against its own untrained start, paired over the same prompts (the in-domain
code distillation of docs/results.md):

    draftsmith train configs/qwen2.5-coder-1.5b-instruct/draft_lm.yaml --output-dir runs/qwen-coder-draft_lm
    python scripts/bench_qwen_kinds.py --runs draft_lm=runs/qwen-coder-draft_lm --k 6 --k-sweep 6 \\
        --humaneval 32 --per-category 0 --no-adaptive --no-useless --out results/qwen-code-distilled

Every trained drafter's τ at each --k that --k-sweep also runs is compared with the untrained
pair's at that K: the difference and its standard error paired over the prompts (`paired`).

Prompts: held-out HumanEval problems and MT-Bench's coding, math and writing first turns (the
drafters train on ShareGPT, so both sets are held out). The plain baseline and every method run
on the matmul kernels `--cpu-matmul auto` picks on this machine (the best plain decoding here).

Writes OUT/results.json (stamped: machine, commit, date, command), OUT/table.md and, per trained
kind, OUT/curves-<kind>.png (its training curves, as the trainer drew them) beside its training
summary (steps, tokens, τ measured during training). Run it alone on the machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from draftsmith.evaluation.benchkit import markdown_table, parser, run_main, save

TARGET, PAIR = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"


def prompts(tokenizer, humaneval: int, per_category: int):
    from draftsmith.evaluation.prompts import Prompt, load_prompts, read_rows, render_chat

    out = load_prompts("humaneval", tokenizer, humaneval)
    for category in ("coding", "math", "writing"):
        rows = [r for r in read_rows("mt-bench") if r["category"] == category][:per_category]
        for r in rows:
            text, ids = render_chat(tokenizer, [{"role": "user", "content": r["turns"][0]}], "mt-bench")
            out.append(Prompt(ids, text, category, 1, f"mt-bench/{r['question_id']}", "mt-bench"))
    return out


def training(run: Path) -> dict:
    """What the run trained: steps, tokens, wall time, and τ measured along the way."""
    # a run folder, or one checkpoint inside it (runs/NAME/final: the run's end, not its best/)
    found = [p / "train_summary.json" for p in (run, run.parent) if (p / "train_summary.json").is_file()]
    summary = json.loads(found[0].read_text()) if found else {}
    keep = ("steps", "tokens", "train_seconds", "best", "acceptance", "eval")
    return {k: summary[k] for k in keep if k in summary}


def main(args) -> dict:
    from draftsmith.evaluation.bench import Method, format_compare, run_compare, tau_difference
    from draftsmith.infer.sampling import GREEDY
    from draftsmith.models import Checkpoint, DraftLM, Target, load_drafter

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = Target.load(args.target, dtype=args.dtype)
    runs = dict(item.split("=", 1) for item in args.runs.split(",") if item)
    drafters, trained = {}, {}
    for name, run in runs.items():
        ckpt = Checkpoint.find(run, "--runs")
        drafters[name] = load_drafter(str(ckpt.path), target)
        trained[name] = {"checkpoint": str(ckpt.path), **training(Path(run))}
        curves = Path(run) / "curves.png"
        if curves.is_file():
            shutil.copyfile(curves, out / f"curves-{name}.png")
    drafters["qwen0.5b"] = load_drafter(args.pair, target)
    if not args.no_useless:
        drafters["truncated:1"] = load_drafter("truncated:1", target)
    if args.whole_vocab:  # the same weights drafting over the whole vocabulary: what the draft vocabulary adds
        for name in runs:
            if drafters[name].draft_ids is not None:
                whole = DraftLM.from_pretrained(trained[name]["checkpoint"], target, draft_vocab=False)
                drafters[f"{name} whole vocab"] = whole
    # The best plain decoding on this machine: the kernel auto picks for one row and for K+1 rows.
    choices = {}
    for name, d in drafters.items():
        if not d.needs_hidden_states:
            choices[name] = target.use_cpu_matmul("auto", max(args.k) + 1, d, "auto")
    methods = [Method(f"qwen0.5b K={k}", drafters["qwen0.5b"], k) for k in args.k_sweep]
    if not args.no_adaptive:
        methods.append(Method("qwen0.5b adaptive", drafters["qwen0.5b"], max(args.k_sweep), adaptive=True))
    for name in [*runs, *(["truncated:1"] if "truncated:1" in drafters else [])]:
        d = drafters[name]
        cap = d.max_speculative_tokens or 99
        if not (name == "truncated:1" and args.no_useless_fixed):
            methods += [Method(f"{name} K={k}", d, min(k, cap)) for k in args.k]
        if not args.no_adaptive:
            methods.append(Method(f"{name} adaptive", d, None, adaptive=True))
        if f"{name} whole vocab" in drafters:
            methods.append(Method(f"{name} whole vocab K={max(args.k)}", drafters[f"{name} whole vocab"], max(args.k)))
    ps = prompts(target.tokenizer, args.humaneval, args.per_category)
    result = run_compare(target, methods, ps, args.max_new_tokens, GREEDY, progress=not args.quiet)
    # each trained drafter against the untrained pair at the same K, paired over the same prompts
    paired = [
        tau_difference(result, f"{name} K={k}", f"qwen0.5b K={k}")
        for name in runs
        for k in args.k
        if k in args.k_sweep and f"{name} K={k}" in result["methods"]
    ]
    result.update(training=trained, cpu_matmul_choices=choices, k_sweep=args.k_sweep, paired=paired)
    print(format_compare(result))
    for d in paired:
        print(paired_line(d))
    (out / "table.md").write_text(table(result) + "\n" + "".join(f"\n{paired_line(d)}\n" for d in paired))
    return result


def paired_line(d: dict) -> str:
    """τ(a) − τ(b) ± its paired standard error, and whether it is a difference at all."""
    if d["difference"] is None:
        return f"{d['a']} − {d['b']}: τ not measured (nothing drafted)"
    se = "n/a" if d["se"] is None else f"{d['se']:.3f}"
    verdict = "beyond two standard errors" if d["beyond_two_se"] else "within two standard errors: no difference"
    return f"τ {d['a']} − {d['b']}: {d['difference']:+.3f} ± {se} over {d['num_prompts']} prompts ({verdict})"


def table(result: dict) -> str:
    rows = []
    for name, r in result["methods"].items():
        costs = r.get("step_costs_s")
        draft_cost = costs["t_draft_k"] / costs["t_step"] if costs else None
        by = r.get("by_domain", {})
        cell = lambda g: f"{by[g]['mean_acceptance_length']:.2f} / {by[g]['speedup']:.2f}x" if g in by else "-"  # noqa: E731
        k = r.get("adaptive_k")
        rows.append(
            [
                name,
                f"{r['mean_acceptance_length']:.2f}"
                + ("" if r.get("mean_acceptance_length_se") is None else f" ± {r['mean_acceptance_length_se']:.2f}"),
                "-" if draft_cost is None else f"{draft_cost:.2f}",
                "-" if r.get("predicted_speedup") is None else f"{r['predicted_speedup']:.2f}x",
                f"{r['speedup']:.2f}x",
                cell("humaneval"),
                cell("coding"),
                cell("math"),
                cell("writing"),
                "-" if not k else ", ".join(f"{key}:{n}" for key, n in k["k_counts"].items()),
                {True: "yes", False: "NO", None: "-"}[r["outputs_match_plain"]],
            ]
        )
    head = [
        "method",
        "τ",
        "drafting / step",
        "predicted",
        "measured",
        "HumanEval τ / x",
        "coding",
        "math",
        "writing",
        "K chosen (steps)",
        "= plain",
    ]
    return markdown_table(head, rows)


def arguments(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--pair", default=PAIR, help="the pretrained draft LM benched untrained, at every K of --k-sweep")
    ap.add_argument(
        "--runs",
        default="",
        help="name=run-folder,... of trained drafters (best/ or final/ is used; name runs/NAME/final for the end)",
    )
    ap.add_argument(
        "--k",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[4],
        help="the fixed K(s) of every trained drafter",
    )
    ap.add_argument(
        "--whole-vocab",
        action="store_true",
        help="also bench each trained draft LM that has a draft vocabulary over its whole one (at the largest --k)",
    )
    ap.add_argument("--no-useless-fixed", action="store_true", help="bench the useless draft with adaptive K only")
    ap.add_argument("--no-useless", action="store_true", help="leave the useless draft out")
    ap.add_argument("--no-adaptive", action="store_true", help="fixed K only (no adaptive-K rows)")
    ap.add_argument("--k-sweep", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 6, 8])
    ap.add_argument("--humaneval", type=int, default=6, help="HumanEval problems")
    ap.add_argument("--per-category", type=int, default=2, help="MT-Bench first turns per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default="results/qwen-kinds")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def run(args) -> None:
    save(main(args), Path(args.out) / "results.json")


if __name__ == "__main__":
    run_main(run, arguments())
