"""`--dtype auto` and the thread count (infer/hardware.py): the choice follows the CPU's flags and
a measurement, is cached per machine, and is recorded with its reason."""

import json

import pytest
import torch

from draftsmith.infer import hardware


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """auto_dtype with the env override off, a private cache, and the probe replaced by given times."""
    monkeypatch.delenv("DRAFTSMITH_DTYPE_AUTO", raising=False)
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    calls = []

    def setup(flags: dict, times: dict):
        monkeypatch.setattr(
            hardware,
            "cpu_info",
            lambda: {"model": "Test CPU", "flags": flags, "cores": 2, "affinity_cores": 2, "threads": 2},
        )

        def probe(dtype, repeats=30):
            calls.append(dtype)
            return times[dtype]

        monkeypatch.setattr(hardware, "_probe", probe)
        return calls

    return setup


def test_no_bf16_flags_means_fp32_without_measuring(measured):
    calls = measured({"avx2": True, "avx512f": True, "avx512_bf16": False, "amx_bf16": False}, {})
    dtype, why = hardware.auto_dtype("cpu")
    assert (dtype, calls) == ("float32", []) and "without AMX or AVX512-BF16" in why


def test_bf16_flag_and_faster_measurement_picks_bf16_once(measured, tmp_path):
    calls = measured({"avx512_bf16": True, "amx_bf16": False}, {torch.float32: 1.0, torch.bfloat16: 0.6})
    dtype, why = hardware.auto_dtype("cpu")
    assert dtype == "bfloat16" and "avx512_bf16" in why and "0.60x" in why
    assert hardware.auto_dtype("cpu")[0] == "bfloat16" and len(calls) == 2  # cached: measured once
    cached = json.loads((tmp_path / "dtype_auto.json").read_text())
    assert [v["bf16_s"] for v in cached.values()] == [0.6]


def test_bf16_flag_but_not_faster_keeps_fp32(measured):
    measured({"amx_bf16": True, "avx512_bf16": True}, {torch.float32: 1.0, torch.bfloat16: 0.95})
    dtype, why = hardware.auto_dtype("cpu")
    assert dtype == "float32" and "0.95x" in why


def test_env_override_and_cuda(monkeypatch):
    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "bfloat16")
    assert hardware.auto_dtype("cpu") == ("bfloat16", "set by DRAFTSMITH_DTYPE_AUTO")
    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "int8")
    from draftsmith.errors import DraftsmithError

    with pytest.raises(DraftsmithError, match="DRAFTSMITH_DTYPE_AUTO='int8'"):
        hardware.auto_dtype("cpu")
    monkeypatch.delenv("DRAFTSMITH_DTYPE_AUTO")
    assert hardware.auto_dtype("cuda")[0] == "bfloat16"


def test_threads_follow_the_affinity(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: {0})
    try:
        assert hardware.use_affinity_threads() == 1 and torch.get_num_threads() == 1
        assert hardware.cpu_info()["affinity_cores"] == 1
    finally:
        torch.set_num_threads(before)


def test_real_probe_runs_both_dtypes():
    """The measurement itself (not mocked): positive, finite times for both dtypes."""
    t32, t16 = hardware._probe(torch.float32, repeats=2), hardware._probe(torch.bfloat16, repeats=2)
    assert 0 < t32 < 10 and 0 < t16 < 10


def test_target_records_the_choice(tiny_cache, monkeypatch):
    from draftsmith.models import Target

    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "float32")
    t = Target.load("tiny-random", dtype="auto", device="cpu")
    assert t.dtype == torch.float32 and t.dtype_reason == "set by DRAFTSMITH_DTYPE_AUTO"
    assert Target.load("tiny-random", dtype="float32", device="cpu").dtype_reason == "asked for"


def test_bench_verify_cost_measures_each_dtype_side_by_side(tmp_path):
    """The step-cost script (tiny shape, two repeats): one row per dtype, the machine recorded."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "cost.json"
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_verify_cost.py"
    r = subprocess.run(
        [
            sys.executable,
            str(script),
            "--shapes",
            "tiny",
            "--context",
            "32",
            "--chains",
            "3",
            "--trees",
            "8",
            "--repeats",
            "2",
            "--dtype",
            "float32,bfloat16",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert [row["dtype"] for row in data["rows"]] == ["float32", "bfloat16"]
    assert all(row["t_step"] > 0 and row["t_verify_chain3"] > 0 for row in data["rows"])
    assert data["environment"]["cpu"]["model"] and "machine:" in r.stdout
