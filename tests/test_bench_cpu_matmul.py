"""scripts/bench_cpu_matmul.py on small shapes: every candidate is timed or says why it is not
available here, and the exact ones (all but a quantised weight) agree with a float64 reference
as closely as torch's own F.linear does."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_candidates_side_by_side(tmp_path):
    out = tmp_path / "c.json"
    cmd = [sys.executable, "scripts/bench_cpu_matmul.py", "--shapes", "96x64", "--rows", "1,3"]
    done = subprocess.run(
        [*cmd, "--repeats", "2", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["machine"]["device"] == "cpu" and r["dtype"] == "float32"
    rows = r["results"]
    assert {k.split()[-1] for k in rows} >= {"linear", "transposed", "mkl-packed", "onednn-packed", "int8-weight"}
    for key, x in rows.items():
        assert x["status"] == "ok" or x["status"].startswith(("unavailable", "failed")), key
        if x["status"] == "ok" and x["candidate"] != "int8-weight":
            assert x["outputs"] == "exact (summation order)", key
            assert x["ms"] > 0 and x["x_one_row_linear"] > 0
    for rows_ in (1, 3):
        assert rows[f"96x64 rows={rows_} linear"]["status"] == "ok"
        assert rows[f"96x64 rows={rows_} transposed"]["status"] == "ok"
    assert "96x64" in done.stdout and "transposed" in done.stdout


def test_the_real_models_step_costs_under_each_kernel(tiny_cache, tmp_path):
    import os

    from draftsmith.infer.kernels import KERNELS

    out = tmp_path / "steps.json"
    cmd = [sys.executable, "scripts/bench_cpu_matmul.py", "--target", "tiny-random", "--draft", "truncated:2"]
    done = subprocess.run(
        [*cmd, "-k", "3", "--json", str(out)],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(out.read_text())
    assert set(r["kernels"]) == set(KERNELS) and r["k"] == 3
    for name, c in r["kernels"].items():
        assert c["t_step_ms"] > 0 and c["t_verify_ms"] > 0 and c["t_draft_k_ms"] > 0, name
        assert c["verify_over_step"] == c["t_verify_ms"] / c["t_step_ms"]
    assert r["kernels"]["linear"]["step_over_linear_step"] == 1.0 and "onednn" in done.stdout
