"""Two versions of draftsmith's runtime side by side: `draftsmith bench` of an earlier commit and of
this checkout, alternated run by run on the same target, draft and prompts.

A change to the decoding loop must not make any CPU figure slower. This script answers that with
the runtime's own benchmark: each repeat runs the earlier commit's `bench` and then this
checkout's (the order alternates between repeats, so drift on a noisy machine falls on both), and
the table puts the medians of plain tokens/s, speculative tokens/s and τ beside each other.

The earlier commit is checked out into a temporary git worktree and imported from there: a
folder that lays the worktree out as the installed package does (`draftsmith.models` -> models/,
`draftsmith.train` -> train/, `draftsmith.infer` -> infer/), put first on PYTHONPATH.

    python scripts/bench_before_after.py --before 7c552ef --target smollm2-135m-instruct \\
        --draft prompt_lookup -k 3 --prompts chat,code --num-prompts 6 --json results/x.json

Pick a drafter both versions load the same way (a pretrained draft LM, `prompt_lookup`): a
checkpoint format that changed between them measures the format, not the loop.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from draftsmith.evaluation.benchkit import markdown_table, parser, run_main, save

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"models": "models", "train": "train", "infer": "infer"}  # pyproject's package-dir


def checkout(ref: str, into: Path) -> Path:
    """`ref` as an importable draftsmith under `into`; returns the folder for PYTHONPATH."""
    tree = into / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), ref], check=True, capture_output=True
    )
    shim = into / "path" / "draftsmith"
    shim.mkdir(parents=True)
    for entry in (tree / "draftsmith").iterdir():
        (shim / entry.name).symlink_to(entry)
    for name, folder in PACKAGE_DIRS.items():
        if not (shim / name).exists():
            (shim / name).symlink_to(tree / folder)
    return into / "path"


def bench(pythonpath: str | None, args, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "draftsmith.cli",
        "bench",
        "--target",
        args.target,
        "--draft",
        args.draft,
        "-k",
        str(args.k),
        "--prompts",
        args.prompts,
        "--num-prompts",
        str(args.num_prompts),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--dtype",
        args.dtype,
        "--no-hf",
        "--json",
        str(out),
    ]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run(cmd, check=True, env=env, cwd=pythonpath or ROOT, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def figures(report: dict) -> dict:
    methods = report["methods"]
    return {
        "plain_tokens_per_s": methods["plain"]["tokens_per_s"],
        "speculative_tokens_per_s": methods["speculative"]["tokens_per_s"],
        "speedup": report["speedup"],
        "mean_acceptance_length": report["mean_acceptance_length"],
        "greedy_outputs_match": report.get("greedy_outputs_match"),
        "commit": report.get("commit"),
    }


def main(args) -> dict:
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="before-after-") as tmp:
        tmp = Path(tmp)
        old = checkout(args.before, tmp)
        try:
            for r in range(args.repeats):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for which in order:
                    path = tmp / f"{which}-{r}.json"
                    runs[which].append(figures(bench(str(old) if which == "before" else None, args, path)))
                    row = runs[which][-1]
                    print(
                        f"repeat {r + 1}/{args.repeats} {which}: plain {row['plain_tokens_per_s']:.2f} tok/s, "
                        f"speculative {row['speculative_tokens_per_s']:.2f} tok/s, "
                        f"tau {row['mean_acceptance_length']:.2f}",
                        flush=True,
                    )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "tree")], capture_output=True
            )
    med = {
        w: {
            key: statistics.median(x[key] for x in rs)
            for key in ("plain_tokens_per_s", "speculative_tokens_per_s", "speedup", "mean_acceptance_length")
        }
        for w, rs in runs.items()
    }
    ratio = {key: med["after"][key] / med["before"][key] for key in med["after"] if med["before"][key]}
    return {
        "before": args.before,
        "settings": {
            k: getattr(args, k)
            for k in ("target", "draft", "k", "prompts", "num_prompts", "max_new_tokens", "dtype", "repeats")
        },
        "runs": runs,
        "median": med,
        "after_over_before": ratio,
    }


def table(result: dict) -> str:
    med, ratio = result["median"], result["after_over_before"]
    rows = [
        [key, f"{med['before'][key]:.3f}", f"{med['after'][key]:.3f}", f"{ratio.get(key, 0):.3f}x"]
        for key in med["before"]
    ]
    return markdown_table(["median", f"before ({result['before']})", "after (this checkout)", "after/before"], rows)


def arguments(argv=None):
    ap = parser(
        __doc__,
        target="smollm2-135m-instruct",
        draft="prompt_lookup",
        dtype="float32",
        prompts="chat,code",
        num_prompts=6,
        max_new_tokens=64,
        repeats=2,
        json=None,
    )
    ap.add_argument("--before", required=True, help="the earlier commit (any git ref)")
    ap.add_argument("-k", type=int, default=3, help="fixed K in both (adaptive K is off when K is given)")
    return ap.parse_args(argv)


def run(args) -> None:
    result = main(args)
    print(table(result))
    save(result, args.json)


if __name__ == "__main__":
    run_main(run, arguments())
