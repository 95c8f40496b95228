"""scripts/bench_before_after.py on the tiny target: an earlier commit checked out and imported
from its own worktree, both versions benched alternately, medians and ratios in a stamped JSON."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_commit_against_this_checkout(tiny_cache, tmp_path):
    out = tmp_path / "ba.json"
    before = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    cmd = [
        sys.executable,
        "scripts/bench_before_after.py",
        "--before",
        before,
        "--target",
        "tiny-random",
        "--draft",
        "truncated:1",
        "-k",
        "2",
        "--prompts",
        "chat",
        "--num-prompts",
        "1",
        "--max-new-tokens",
        "6",
        "--repeats",
        "2",
        "--json",
        str(out),
    ]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["before"] == before and result["command"] and result["machine"]
    assert [len(result["runs"][w]) for w in ("before", "after")] == [2, 2]
    for which in ("before", "after"):
        for row in result["runs"][which]:
            assert row["plain_tokens_per_s"] > 0 and row["greedy_outputs_match"] is True
    # the earlier version really ran from its worktree: its reports carry that commit
    assert all(row["commit"].startswith(before) for row in result["runs"]["before"])
    # both ran the same tokens with the same draft: tau agrees exactly
    assert result["median"]["before"]["mean_acceptance_length"] == result["median"]["after"]["mean_acceptance_length"]
    assert set(result["after_over_before"]) == set(result["median"]["after"])
    assert "after/before" in run.stdout
    # the worktree is gone afterwards
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "before-after-" not in listed
