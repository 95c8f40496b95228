"""scripts/gpu_check.sh, the one prepared GPU run, checked here on the CPU: it parses, and its
engine bench runs where the optional packages the GPU image lacks cannot be imported."""

import json
import math
import os
import pathlib
import runpy
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Not on the GPU machine: every import of these must stay lazy on the paths gpu_check.sh runs.
ABSENT = ("datasets", "gguf", "deepspeed", "wandb", "peft", "chitchat_dataset")


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], check=True)


def test_bench_engine_without_optional_packages(tmp_path):
    out, k, n = tmp_path / "engine.json", 4, 24
    argv = [
        "bench_engine.py",
        "--shapes",
        "tiny",
        "--device",
        "cpu",
        "-k",
        str(k),
        "--max-new-tokens",
        str(n),
        "--prompt-len",
        "8",
        "--repeats",
        "1",
        "--out",
        str(out),
    ]
    code = (
        f"import sys, runpy\nfor m in {ABSENT!r}: sys.modules[m] = None\n"
        f"sys.argv = {argv!r}\nrunpy.run_path({str(ROOT / 'scripts' / 'bench_engine.py')!r}, run_name='__main__')\n"
        f"assert not [m for m in {ABSENT!r} if sys.modules.get(m) is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=300)
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"plain", f"oracle chain{k}", f"self chain{k}", "oracle tree30"}  # CPU: eager only
    assert all(r["same_as_plain"] and r["new_tokens"] == n and r["mode"] == "eager" for r in rows.values())
    assert rows["plain"]["mean_acceptance_length"] == 1.0 and rows["plain"]["target_forwards"] == n - 1
    for method in (f"oracle chain{k}", f"self chain{k}", "oracle tree30"):
        # every draft accepted: k+1 tokens per target forward (the first token comes from prefill)
        assert rows[method]["mean_acceptance_length"] == k + 1, method
        assert rows[method]["target_forwards"] == math.ceil((n - 1) / (k + 1)), method


def test_gpu_check_kinds_and_training_steps_run_on_cpu(tmp_path):
    """The parts of the GPU run that need no CUDA, on the CPU: a drafter kind trained briefly and
    decoded through `draftsmith bench --compile off`, the training-throughput bench, and the
    summary's rows for both (the compiled mode and FSDP need a GPU)."""
    out = tmp_path / "gpu"
    env = {
        **os.environ,
        "STEPS": "kinds train",
        "KINDS": "draft_lm",
        "MODES": "off",
        "DEVICE": "cpu",
        "TRAIN_STEPS": "3",
        "SKIP_INSTALL": "1",
        "STEP_TIMEOUT": "0",  # no per-step cap on the CPU: a busy machine is slow, not hung
        "OUT": str(out),
    }
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], check=True, env=env, cwd=ROOT, timeout=3600)
    bench = json.loads((out / "kind_draft_lm_off.json").read_text())
    assert bench["compiled"] is False and bench["greedy_outputs_match"] is True and bench["drafter_kind"] == "draft_lm"
    for kind in ("draft_lm", "eagle3"):
        train = json.loads((out / f"train_{kind}.json").read_text())
        assert 0 < train["train_over_forward"] and 0 < train["flop_bound"] < 1
        # scripts/flop_bound.py's formula (what it states for targets too large to run here)
        # redoes FlopCounterMode's count of this real training step
        flop_bound = runpy.run_path(str(ROOT / "scripts" / "flop_bound.py"))
        assert (
            flop_bound["main"](["--check", str(out / f"train_{kind}.json"), "--json", str(out / f"bound_{kind}.json")])
            == 0
        )
        check = json.loads((out / f"bound_{kind}.json").read_text())["checks"][0]
        assert abs(check["formula"] - check["counted"]) < 0.05 * check["counted"], check
    summary = (out / "summary.txt").read_text()
    assert "| draft_lm | eager |" in summary and "training eagle3 (no)" in summary


def test_gpu_check_summary_shows_compiled_drafting(tmp_path):
    """The eager-vs-compiled drafting step's JSON (made here for real on the CPU: inductor compiles
    the truncated draft's decode forwards) turns into the summary's table."""
    out = tmp_path / "gpu"
    out.mkdir()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_compiled_drafting.py"),
            "--target",
            "tiny-random",
            "--draft",
            "truncated:1",
            "--dtype",
            "float32",
            "--device",
            "cpu",
            "--prompts",
            "chat",
            "--num-prompts",
            "2",
            "--max-new-tokens",
            "12",
            "--json",
            str(out / "compiled_drafting.json"),
        ],
        check=True,
        cwd=ROOT,
        timeout=600,
    )
    env = {**os.environ, "STEPS": "none", "SKIP_INSTALL": "1", "OUT": str(out)}
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], check=True, env=env, cwd=ROOT, timeout=300)
    summary = (out / "summary.txt").read_text()
    assert "| draft_lm eager |" in summary and "| draft_lm compiled |" in summary and "| True | True |" in summary
