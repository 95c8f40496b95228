"""The README's main command, scripts/quickstart.sh, end to end on tiny settings: a one-minute
training budget, the benchmark, and the plain-language verdict at the end."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quickstart_trains_for_its_budget_then_benchmarks_and_says_so(tiny_cache, tmp_path):
    out = tmp_path / "qs"
    env = {
        **os.environ,
        "SKIP_SETUP": "1",
        "RECIPE": "configs/tiny/eagle3.yaml",
        "OUT": str(out),
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    proc = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--minutes", "0.5", "--no-hf", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "eagle3" / "train_summary.json").read_text())
    assert 1 <= summary["steps"]
    assert "eval/simulated_acceptance_length" in summary["eval"]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["drafter_kind"] == "eagle3" and bench["tree"] and bench["greedy_outputs_match"] is True
    assert (out / "acceptance.png").is_file()
    assert "EAGLE-3 after 0.5 min of training: mean_acceptance_length" in proc.stdout
    fixed = bench["fixed_k"]  # the adaptive runtime (the default) ran beside the tree drafted every step
    assert "with the adaptive runtime" in proc.stdout and bench["adaptive_k"]["k_counts"]
    assert f"{fixed['speedup']:.2f}x drafting its tree every step" in proc.stdout
    assert f"{bench['speedup']:.2f}x with the adaptive runtime" in proc.stdout
    verdict = "Drafting every step does not beat plain decoding" in proc.stdout
    assert verdict == (fixed["speedup"] < 1)
    # the default runtime below plain decoding never goes without its reason
    assert ("The adaptive runtime ran at" in proc.stdout) == (bench["speedup"] < 1)
    assert f"checkpoint {out}/eagle3/final" in proc.stdout


def test_the_step_cap_scales_with_the_device():
    """22 steps a minute is a CPU's rate; on a GPU the cap follows the plan's rate there, so
    --minutes 60 on a GPU schedules the steps a GPU reaches, not 1320."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from quickstart_steps import step_cap
    finally:
        sys.path.pop(0)
    recipe = str(ROOT / "configs/smollm2-135m-instruct/eagle3_quick.yaml")
    assert step_cap(recipe, 60, cuda=False) == 1320 and step_cap(recipe, 0.1, cuda=False) == 4
    on_gpu = step_cap(recipe, 60, cuda=True, tflops=989.0)  # an H100's bf16 peak
    assert on_gpu > 10 * 1320
