"""scripts/bench_qwen_coder.py on tiny settings: distil a draft, measure the step costs before
and after the kernel choice, and put plain decoding, ours and transformers' assisted generation
with the untrained and the distilled draft side by side, every greedy output equal to plain's;
a rerun reuses the distilled draft."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(tmp_path, run):
    cmd = [
        sys.executable,
        "scripts/bench_qwen_coder.py",
        "--target",
        "tiny-random",
        "--draft",
        "truncated:2",
        "--recipe",
        "configs/tiny/draft_lm.yaml",
        "--draft-run",
        str(run),
        "--train-minutes",
        "0.05",
        "--humaneval",
        "1",
        "--per-category",
        "1",
        "--max-new-tokens",
        "8",
        "-k",
        "3",
        "--out",
        str(tmp_path / "out"),
    ]
    return subprocess.run(cmd, cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=900)


def test_the_pair_bench_end_to_end(tiny_cache, tmp_path):
    run = tmp_path / "draft"
    done = _run(tmp_path, run)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "final").is_dir() and "distilling:" in done.stdout
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    assert r["prompts"][0] == "HumanEval/0" and [p.split("/")[0] for p in r["prompts"][1:]] == ["mt-bench"] * 2
    names = set(r["methods"])
    assert names == {
        "plain",
        "ours (untrained)",
        "ours (distilled)",
        "transformers assisted (untrained)",
        "transformers assisted (distilled)",
        "transformers assisted, our kernels (untrained)",
    }
    for name, m in r["methods"].items():
        assert m["outputs_match_plain"] is True, name  # fp32, greedy: exact
        assert set(m["by_domain"]) == {"humaneval", "coding", "math"}
    ours = r["methods"]["ours (distilled)"]
    assert ours["mean_acceptance_length"] >= 1 and ours["predicted_speedup"] > 0
    assert ours["speedup_vs_transformers_assisted"] > 0 and ours["measured_over_predicted"] > 0
    split = ours["time_split_s"]  # where the time went: the decode steps and the rest (prefill, host)
    assert split["plain"]["outside_steps"] > 0 and split["speculative"]["in_steps"] > 0
    assert ours["decode_measured_over_predicted"] == ours["speedup_decode"] / ours["predicted_speedup"]
    assert "decode-phase speedup" in done.stdout
    before, after = r["step_costs"]["before"], r["step_costs"]["after"]
    assert before["choice"]["target"]["kernel"] == "linear" and before["choice"]["target"]["why"] == "asked for"
    assert (
        after["choice"]["target"]["kernel"] in ("linear", "transposed") and "rows" in after["choice"]["target"]["why"]
    )
    assert before["verify_over_step"] > 0 and after["draft_token_over_step"] > 0
    assert r["machine"]["device"] == "cpu" and r["command"]
    assert (tmp_path / "out" / "qwen_coder.png").stat().st_size > 1000
    again = _run(tmp_path, run)  # the distilled draft is reused, not retrained
    assert again.returncode == 0 and "distilling:" not in again.stdout
