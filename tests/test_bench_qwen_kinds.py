"""scripts/bench_qwen_kinds.py on tiny settings: trained drafters, a pretrained draft at several
fixed K, a useless draft and every drafter's adaptive K side by side with plain decoding in one
run, every greedy output equal to plain's, the table and the stamped JSON written."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_kinds_side_by_side_with_fixed_and_adaptive_k(tiny, tmp_path):
    _, eagle3, _ = tiny("eagle3")
    _, draft_lm, _ = tiny("draft_lm")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "scripts/bench_qwen_kinds.py",
        "--target",
        "tiny-random",
        "--pair",
        "truncated:2",
        "--runs",
        f"eagle3={eagle3},draft_lm={draft_lm}",
        "--k-sweep",
        "2,3",
        "--k",
        "3",
        "--humaneval",
        "1",
        "--per-category",
        "1",
        "--max-new-tokens",
        "8",
        "--dtype",
        "float32",
        "--quiet",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    methods = r["methods"]
    assert set(methods) == {
        "plain",
        "qwen0.5b K=2",
        "qwen0.5b K=3",
        "qwen0.5b adaptive",
        "eagle3 K=3",
        "eagle3 adaptive",
        "draft_lm K=3",
        "draft_lm adaptive",
        "truncated:1 K=3",
        "truncated:1 adaptive",
    }
    assert all(m["outputs_match_plain"] for m in methods.values())
    assert (
        methods["eagle3 adaptive"]["adaptive_k"]["k_counts"] and "predicted_speedup" not in methods["eagle3 adaptive"]
    )
    assert methods["eagle3 K=3"]["predicted_speedup"] > 0 and methods["eagle3 K=3"]["num_speculative_tokens"] == 3
    assert set(methods["plain"]["by_domain"]) == {"humaneval", "coding", "math", "writing"}
    assert "bench_qwen_kinds.py" in r["command"] and r["machine"] and r["commit"] and r["date"]
    table = (out / "table.md").read_text()
    assert "| eagle3 adaptive |" in table and "HumanEval" in table


def test_several_k_a_draft_vocabulary_against_the_whole_one_and_the_useless_draft_adaptive_only(tiny, tmp_path):
    import shutil

    import torch

    from draftsmith.models.draft_lm import write_draft_vocab

    _, draft_lm, _ = tiny("draft_lm")
    folder = tmp_path / "with-vocab"
    shutil.copytree(draft_lm, folder)
    write_draft_vocab(folder, torch.arange(0, 259, 2))  # eos (2) among them
    out = tmp_path / "out"
    cmd = [sys.executable, "scripts/bench_qwen_kinds.py", "--target", "tiny-random", "--pair", "truncated:2"]
    cmd += ["--runs", f"draft_lm={folder}", "--k-sweep", "2", "--k", "2,3", "--whole-vocab", "--no-useless-fixed"]
    cmd += ["--humaneval", "1", "--per-category", "1", "--max-new-tokens", "8", "--dtype", "float32", "--quiet"]
    proc = subprocess.run([*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    methods = json.loads((out / "results.json").read_text())["methods"]
    assert set(methods) == {
        "plain",
        "qwen0.5b K=2",
        "qwen0.5b adaptive",
        "draft_lm K=2",
        "draft_lm K=3",
        "draft_lm adaptive",
        "draft_lm whole vocab K=3",
        "truncated:1 adaptive",
    }
    assert all(m["outputs_match_plain"] for m in methods.values())
    assert methods["draft_lm K=3"]["draft_vocab_size"] == 130
    assert methods["draft_lm whole vocab K=3"]["draft_vocab_size"] is None


def test_a_trained_draft_against_its_untrained_start_paired_at_one_k(tiny, tmp_path):
    """The in-domain comparison: fixed K only, no useless draft, and the trained draft's τ minus
    the untrained pair's at the same K with its paired standard error, in the JSON and the table."""
    _, draft_lm, _ = tiny("draft_lm")
    out = tmp_path / "out"
    cmd = [sys.executable, "scripts/bench_qwen_kinds.py", "--target", "tiny-random", "--pair", "truncated:2"]
    cmd += ["--runs", f"draft_lm={draft_lm}", "--k", "3", "--k-sweep", "3", "--humaneval", "3", "--per-category", "0"]
    cmd += [
        "--no-adaptive",
        "--no-useless",
        "--max-new-tokens",
        "8",
        "--dtype",
        "float32",
        "--quiet",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    assert set(r["methods"]) == {"plain", "qwen0.5b K=3", "draft_lm K=3"}
    (d,) = r["paired"]
    assert (d["a"], d["b"], d["num_prompts"]) == ("draft_lm K=3", "qwen0.5b K=3", 3)
    tau = {n: r["methods"][n]["mean_acceptance_length"] for n in (d["a"], d["b"])}
    assert abs(d["difference"] - (tau[d["a"]] - tau[d["b"]])) < 1e-9
    assert "τ draft_lm K=3 − qwen0.5b K=3:" in (out / "table.md").read_text()
