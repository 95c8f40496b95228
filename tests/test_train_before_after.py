"""scripts/train_before_after.py on the tiny target: one recipe trained by two commits from their
own worktrees at the same steps, both drafts measured by this checkout's eval on the same prompts,
and their τ difference paired over the prompts in a stamped JSON."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_same_commit_twice_trains_the_same_draft_and_no_difference(tiny_cache, tmp_path):
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    out = tmp_path / "tba.json"
    cmd = [sys.executable, "scripts/train_before_after.py", "--before", head, "--after", head]
    cmd += ["--recipe", "configs/tiny/eagle3.yaml", "--steps", "3", "--set", "logging.acceptance_prompts=0"]
    cmd += ["--set", "logging.eval_every=0", "--set", "data.max_rows=120", "--prompts", "chat", "--num-prompts", "3"]
    # --work relative to where the script starts (the runs must not land inside a worktree it removes)
    cmd += ["--max-new-tokens", "8", "-k", "3", "--work", "work", "--json", str(out)]
    run = subprocess.run(
        [*cmd[:1], str(ROOT / cmd[1]), *cmd[2:]], cwd=tmp_path, capture_output=True, text=True, timeout=1200
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["command"] and result["machine"] and result["date"]
    before, after = result["sides"]["before"], result["sides"]["after"]
    for side in (before, after):
        assert side["commit"].startswith(head) and side["steps"] == 3 and side["num_prompts"] == 3
        assert pathlib.Path(side["final"]).is_dir() and pathlib.Path(side["final"]).is_relative_to(tmp_path)
    # same code, same seed, same rows: the same weights, so the same tokens drafted and accepted
    assert before["mean_acceptance_length"] == after["mean_acceptance_length"]
    d = result["after_minus_before"]
    assert d["mean_acceptance_length"] == 0.0 and d["paired_over_prompts"] == 3
    assert "after − before" in run.stdout
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "train-before-after-" not in listed


def test_steps_are_required():
    run = subprocess.run(
        [sys.executable, "scripts/train_before_after.py", "--before", "HEAD", "--recipe", "configs/tiny/eagle3.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and "--steps N" in run.stderr


def test_a_side_whose_packages_would_come_from_elsewhere_is_refused(tmp_path):
    """A tree whose draftsmith lacks train/ (started from the tree, the installed package fills the
    gap): training it would run another side's code, so the script refuses."""
    import importlib.util
    import os

    import pytest

    tree = tmp_path / "tree"
    (tree / "draftsmith").mkdir(parents=True)
    (tree / "draftsmith" / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location("tba", ROOT / "scripts" / "train_before_after.py")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        tba = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tba)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    with pytest.raises(SystemExit, match="would import from outside"):
        tba.check_imports("before", dict(os.environ), tree, tree)
