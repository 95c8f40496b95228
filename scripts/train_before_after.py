#!/usr/bin/env python
"""One recipe trained by two commits at an equal budget (the same steps and overrides), both
drafts then measured by the current code on the same prompts: τ with its standard error for each,
and their difference paired over the prompts. What a change to training (packing, a loss, a
schedule) did to acceptance, with the error that says whether it did anything.

    python scripts/train_before_after.py --before 887ff27^ --after 887ff27 \\
        --recipe configs/smollm2-135m-instruct/eagle3.yaml --steps 150 \\
        --set optim.mixed_precision=bf16 --json results/train-before-after/packing.json

Each side trains in its own git worktree (imported as the installed package is laid out, as
scripts/bench_before_after.py does) with the recipe as that commit ships it; `--after` omitted
trains with the working tree. `draftsmith eval` of this checkout then decodes each side's
`final/` (greedy, K=-k). Sides train one after the other: run it alone on the machine, and read
the training tokens/s as that machine's. Writes a stamped JSON (machine, commit, date, command).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_before_after import ROOT, checkout

from draftsmith.evaluation.benchkit import markdown_table, parser, run_main, save


def check_imports(side: str, env: dict, cwd: Path, tree: Path) -> None:
    """Refuse to train one side with another side's code: every draftsmith package must import
    from that side's tree."""
    probe = (
        "import os, draftsmith, draftsmith.train as t, draftsmith.models as m, draftsmith.infer as i\n"
        "for p in (draftsmith, t, m, i): print(os.path.realpath(p.__path__[0]))"
    )
    paths = subprocess.run([sys.executable, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    mine = [tree.resolve(), *([cwd.resolve()] if cwd != ROOT else [])]  # the tree, or its import folder
    stray = [p for p in paths.stdout.split() if not any(Path(p).is_relative_to(r) for r in mine)]
    if stray:
        raise SystemExit(f"[{side}] draftsmith would import from outside {tree}: {', '.join(stray)}")


def train(side: str, pythonpath: Path | None, tree: Path, args, work: Path) -> dict:
    out = work / side
    cmd = [sys.executable, "-m", "draftsmith.cli", "train", str(tree / args.recipe), "--output-dir", str(out)]
    cmd += [f"--optim.max_steps={args.steps}", *(f"--{kv}" for kv in args.set)]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath) + os.pathsep + env.get("PYTHONPATH", "")
    # Started from the import folder: `python -m` puts the working directory first on sys.path,
    # and from the worktree itself the installed (editable) package would supply draftsmith.train.
    cwd = pythonpath or ROOT
    check_imports(side, env, cwd, tree)
    print(f"[{side}] " + " ".join(cmd[2:]), flush=True)
    t0 = time.perf_counter()
    with open(work / f"{side}.log", "w") as log:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (work / f"{side}.log").read_text()[-2000:]
        raise SystemExit(f"[{side}] training failed (exit {proc.returncode}); the log ends:\n{tail}")
    summary = json.loads((out / "train_summary.json").read_text())
    keep = ("steps", "tokens", "train_seconds")
    return {"final": str(out / "final"), "wall_s": wall, **{k: summary[k] for k in keep if k in summary}}


def evaluate(side: str, final: str, args, work: Path) -> dict:
    path = work / f"eval-{side}.json"
    cmd = [sys.executable, "-m", "draftsmith.cli", "eval", "--draft", final, "-k", str(args.k)]
    cmd += ["--prompts", args.prompts, "--max-new-tokens", str(args.max_new_tokens), "--dtype", args.dtype]
    cmd += [*(["--num-prompts", str(args.num_prompts)] if args.num_prompts else []), "--quiet", "--json", str(path)]
    print(f"[{side}] " + " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(path.read_text())


def main(args) -> dict:
    from draftsmith.infer.metrics import paired_ratio_difference

    work = Path(args.work).resolve()  # each side trains from its own worktree: an absolute path
    work.mkdir(parents=True, exist_ok=True)
    sides, evals = {}, {}
    with tempfile.TemporaryDirectory(prefix="train-before-after-") as tmp:
        trees = []
        try:
            for side, ref in (("before", args.before), ("after", args.after)):
                if ref:
                    path = checkout(ref, Path(tmp) / side)
                    trees.append(Path(tmp) / side / "tree")
                    tree = trees[-1]
                    commit = subprocess.run(
                        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
                    )
                    sides[side] = {"ref": ref, "commit": commit.stdout.strip()}
                else:
                    path, tree = None, ROOT
                    sides[side] = {"ref": "working tree"}
                sides[side].update(train(side, path, tree, args, work))
        finally:
            for tree in trees:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True
                )
    for side in sides:
        evals[side] = evaluate(side, sides[side]["final"], args, work)
        keep = ("mean_acceptance_length", "mean_acceptance_length_se", "per_position_acceptance", "drafts")
        sides[side].update({k: evals[side].get(k) for k in keep}, num_prompts=evals[side]["num_prompts"])
    pa, pb = (evals[s]["per_prompt_acceptance"] for s in ("after", "before"))
    diff, se = paired_ratio_difference([a for a, _ in pa], [d for _, d in pa], [a for a, _ in pb], [d for _, d in pb])
    se = se if math.isfinite(se) else None
    return {
        "recipe": args.recipe,
        "steps": args.steps,
        "overrides": args.set,
        "eval": {
            "k": args.k,
            "prompts": args.prompts,
            "num_prompts": args.num_prompts,
            "dtype": args.dtype,
            "max_new_tokens": args.max_new_tokens,
            "greedy": True,
        },
        "sides": sides,
        "after_minus_before": {
            "mean_acceptance_length": diff,
            "se": se,
            "beyond_two_se": None if se is None else abs(diff) > 2 * se,
            "paired_over_prompts": len(pa),
        },
    }


def table(result: dict) -> str:
    rows = []
    for side, s in result["sides"].items():
        se = s.get("mean_acceptance_length_se")
        tps = s["tokens"] / s["train_seconds"] if s.get("tokens") and s.get("train_seconds") else None
        rows.append(
            [
                side,
                s.get("commit", s["ref"])[:10],
                str(s.get("steps")),
                str(s.get("tokens")),
                "-" if tps is None else f"{tps:.0f}",
                f"{s['mean_acceptance_length']:.3f}" + ("" if se is None else f" ± {se:.3f}"),
                " ".join(f"{a:.2f}" for a in s.get("per_position_acceptance") or []),
            ]
        )
    d = result["after_minus_before"]
    verdict = "beyond two standard errors" if d["beyond_two_se"] else "within two standard errors: no difference"
    se = "n/a" if d["se"] is None else f"{d['se']:.3f}"
    head = ["side", "commit", "steps", "tokens", "train tok/s", "τ ± se", "per-position acceptance"]
    return (
        markdown_table(head, rows) + f"\n\nafter − before: τ {d['mean_acceptance_length']:+.3f} ± {se}, paired over "
        f"{d['paired_over_prompts']} prompts ({verdict})"
    )


def arguments(argv=None):
    p = parser(
        __doc__,
        steps=None,
        k=4,
        prompts="mt-bench,humaneval",
        num_prompts=16,
        max_new_tokens=64,
        dtype="float32",
        json=None,
    )
    p.add_argument("--before", required=True, help="the commit (or any git ref) trained first")
    p.add_argument("--after", default="", help="the commit trained second (default: the working tree)")
    p.add_argument("--recipe", required=True, help="the recipe's path inside the repository")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override for both sides")
    p.add_argument("--work", default="runs/train-before-after", help="where both runs and their logs go")
    args = p.parse_args(argv)
    if not args.steps or args.steps < 1:
        p.error("--steps N (N >= 1): both sides train exactly N optimizer steps")
    return args


def run(args) -> None:
    result = main(args)
    print(table(result))
    if args.json:
        save(result, args.json)


if __name__ == "__main__":
    run_main(run, arguments())
