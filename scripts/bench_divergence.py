#!/usr/bin/env python
"""Equal-budget comparison of training divergences: τ on MT-Bench and HumanEval per kind.

For each kind and each `drafter.divergence`, trains the SmolLM2 recipe on the same rows, for the
same steps, with the same seed (only the divergence differs), then measures the final checkpoint
with `draftsmith eval` (greedy, K tokens drafted per step) on the same prompts, one run after
another on an otherwise idle machine. Prints one table (τ = mean_acceptance_length, counting the
bonus token, per MT-Bench category and on HumanEval) and writes every figure with the machine,
commit, date and command to --json.

    python scripts/bench_divergence.py --kinds eagle3,draft_lm --divergences fkl,tvd --rows 400 \\
        --max-length 128 --batch-size 4 --steps 60 --num-prompts 8 --out runs/divergence

Forward KL (`fkl`, the papers' soft cross-entropy) fits the draft's law to the whole target law;
total variation (`tvd`) is 1 - the expected acceptance of a drafted token (Leviathan et al. 2023,
sec. 3.3: β = 1 - TV(p, q)), the quantity speculative decoding pays for.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time

from draftsmith.evaluation.benchkit import add_flags, markdown_table, parser, run_main, save

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(cmd: list[str], log: pathlib.Path) -> float:
    """Run `cmd` with its output in `log`; seconds taken. A failure stops the comparison."""
    start = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}; see {log}")
    return time.perf_counter() - start


def train_and_measure(args, out: pathlib.Path, budget: list[str], kind: str, divergence: str) -> dict:
    """Train KIND with DIVERGENCE on the shared budget, measure its final checkpoint: its row."""
    recipe = f"{args.recipes}/{kind}.yaml"
    run_dir = out / f"{kind}-{divergence}"
    shutil.rmtree(run_dir, ignore_errors=True)  # this script's own folder: a rerun starts afresh
    train_s = run(
        ["draftsmith", "train", recipe, "--output-dir", str(run_dir), f"--drafter.divergence={divergence}", *budget],
        out / f"{kind}-{divergence}.train.log",
    )
    eval_json = run_dir / "eval.json"
    run(
        [
            "draftsmith",
            "eval",
            "--draft",
            str(run_dir / "final"),
            "--prompts",
            args.prompts,
            "--num-prompts",
            str(args.num_prompts),
            "-k",
            str(args.num_speculative_tokens),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--temperature",
            "0",
            "--quiet",
            "--json",
            str(eval_json),
        ],  # fmt: skip
        out / f"{kind}-{divergence}.eval.log",
    )
    summary = json.loads((run_dir / "train_summary.json").read_text())
    result = json.loads(eval_json.read_text())
    losses = [h["train/loss"] for h in summary["history"] if "train/loss" in h]
    return {
        "kind": kind,
        "divergence": divergence,
        "train_seconds": train_s,
        "final_train_loss": losses[-1] if losses else None,
        "mean_acceptance_length": result["mean_acceptance_length"],
        "by_domain": {g: m["mean_acceptance_length"] for g, m in result.get("by_domain", {}).items()},
        "by_set": {g: m["mean_acceptance_length"] for g, m in result.get("by_set", {}).items()},
        "per_position_acceptance": result.get("per_position_acceptance"),
        "run": str(run_dir),
    }


def table(rows: list[dict]) -> str:
    """τ per kind and divergence: overall, per prompt set, then per MT-Bench category."""
    sets = list(dict.fromkeys(g for r in rows for g in r["by_set"]))
    groups = sets + [g for g in dict.fromkeys(g for r in rows for g in r["by_domain"]) if g not in sets]
    cells = []
    for r in rows:
        values = [r["by_domain"].get(g, r["by_set"].get(g)) for g in groups]
        cells.append([r["kind"], r["divergence"], f"{r['mean_acceptance_length']:.3f}"]
                     + ["" if c is None else f"{c:.2f}" for c in values])  # fmt: skip
    return markdown_table(["kind", "divergence", "τ all", *groups], cells)


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--kinds", default="eagle3,draft_lm", help="recipes under --recipes: KIND.yaml")
    p.add_argument("--divergences", default="fkl,tvd")
    p.add_argument("--recipes", default="configs/smollm2-135m-instruct")
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=4)
    add_flags(
        p,
        steps=60,
        seed=0,
        prompts="mt-bench,humaneval",
        num_prompts={"default": 8, "help": "per prompt set"},
        num_speculative_tokens=4,
        max_new_tokens=64,
        out="runs/divergence",
        json={"default": None, "help": "default: OUT/divergence.json"},
    )
    args = p.parse_args(argv)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = [
        f"--data.max_rows={args.rows}",
        f"--data.max_length={args.max_length}",
        f"--optim.batch_size={args.batch_size}",
        f"--optim.max_steps={args.steps}",
        f"--optim.seed={args.seed}",
        "--logging.eval_every=0",
        "--logging.acceptance_prompts=0",  # τ is measured below, the same way for every run
        "--logging.progress=false",
        "--checkpoint.save_every=0",
    ]
    rows = []
    for kind in args.kinds.split(","):
        for divergence in args.divergences.split(","):
            rows.append(train_and_measure(args, out, budget, kind, divergence))
            print(f"{kind} {divergence}: τ {rows[-1]['mean_acceptance_length']:.3f} "
                  f"({rows[-1]['train_seconds']:.0f} s training)", flush=True)  # fmt: skip

    print()
    print(table(rows))
    budget_info = {k: getattr(args, k) for k in ("rows", "max_length", "batch_size", "steps", "seed")}
    path = args.json or out / "divergence.json"
    evaluation = {"prompts": args.prompts, "num_prompts": args.num_prompts, "k": args.num_speculative_tokens,
                  "max_new_tokens": args.max_new_tokens}  # fmt: skip
    print()
    save({"budget": budget_info, "eval": evaluation, "runs": rows}, path)
    return 0


if __name__ == "__main__":
    run_main(main)
