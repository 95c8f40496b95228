"""What the machine offers the runtime: the CPU's model and flags, its threads, and `--dtype auto`.

The machines this project runs on differ: on a Xeon with AMX a bf16 decode
step is 0.7x an fp32 one and a 16-token verify ~1.1x a step; on an EPYC without AVX-512 bf16 has
no fast kernels. So the runtime decides per machine, by flags and then by a measurement, and
every report records the choice with the flags it was made from.

    auto_dtype(device)   -> ("bfloat16" | "float32", why)   CUDA: bfloat16. CPU: bfloat16 only where
                            the CPU has AMX or AVX512-BF16 AND a weight-streaming matmul (what a
                            decode step is) measured faster in bf16 than in fp32; cached per
                            CPU model, flags, threads and torch version. DRAFTSMITH_DTYPE_AUTO=float32
                            (the tests' setting: exactness is checked in fp32) fixes it unmeasured.
    use_affinity_threads() torch's intra-op threads = the cores this process may run on
                            (sched_getaffinity: a container's or taskset's share, not the host's).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import platform
import time

import torch

from draftsmith.fileio import write_atomic

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # what decides bf16 speed and verify cost
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # oneDNN's native bf16 matmul kernels
BF16_MIN_GAIN = 0.9  # bf16 must take at most this fraction of fp32's time to be chosen
_PROBE_SHAPE = (2048, 4096)  # 32 MB of fp32 weights: streamed from memory, as a decode step's are


def cpu_info() -> dict:
    """The CPU's model name and the flags that change its figures, from /proc/cpuinfo, with the
    threads torch uses and the cores this process may run on."""
    model, flags = None, None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() == "flags" and flags is None:
                    flags = set(value.split())
    except OSError:  # not Linux: the model name only
        pass
    return {
        "model": model or platform.processor() or platform.machine(),
        "flags": None if flags is None else {f: f in flags for f in CPU_FLAGS},
        "cores": os.cpu_count(),
        "affinity_cores": affinity_cores(),
        "threads": torch.get_num_threads(),
    }


def format_cpu(cpu: dict) -> str:
    flags = cpu.get("flags")
    listed = (
        ", ".join(f"{f} {'yes' if v else 'no'}" for f, v in flags.items() if f != "amx_tile")
        if flags
        else "flags unknown"
    )
    return f"{cpu['model']} ({listed}; {cpu['threads']} threads of {cpu['cores']} cores)"


def affinity_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def use_affinity_threads() -> int:
    """Set torch's intra-op threads to the cores this process may run on; -> that number.
    torch defaults to the host's physical cores, which oversubscribes a container's share."""
    n = affinity_cores()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _probe(dtype: torch.dtype, repeats: int = 30) -> float:
    """Median seconds of x[1, d] @ W[d, n] and x[8, d] @ W[d, n] together: a decode step's and a
    verify's weight-streaming GEMV/GEMM, in `dtype`."""
    g = torch.Generator().manual_seed(0)
    d, n = _PROBE_SHAPE
    w = torch.randn(n, d, generator=g).to(dtype)
    xs = [torch.randn(m, d, generator=g).to(dtype) for m in (1, 8)]
    times = []
    with torch.inference_mode():
        for i in range(repeats + 3):  # the first calls create oneDNN's primitives
            t = time.perf_counter()
            for x in xs:
                torch.nn.functional.linear(x, w)
            if i >= 3:
                times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def _cache_file(name: str) -> pathlib.Path:
    root = os.environ.get("DRAFTSMITH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "draftsmith"
    )
    return pathlib.Path(root).expanduser() / name


@contextlib.contextmanager
def measurement_cache(name: str):
    """A dict of this machine's measurements kept in the cache folder's `name`: what the caller
    adds is written back atomically (a read-only cache only costs a re-measurement next time)."""
    path = _cache_file(name)
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    before = json.dumps(cached, sort_keys=True)
    yield cached
    if json.dumps(cached, sort_keys=True) != before:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(cached, indent=1))
        except OSError:
            pass


def auto_dtype(device) -> tuple[str, str]:
    """The dtype `--dtype auto` runs in on `device`, and why (for the report)."""
    device = torch.device(device)
    forced = os.environ.get("DRAFTSMITH_DTYPE_AUTO")  # float32 | bfloat16: what auto means here, unmeasured
    if forced:
        if forced not in ("float32", "bfloat16", "float16"):
            from draftsmith.errors import DraftsmithError

            raise DraftsmithError(f"DRAFTSMITH_DTYPE_AUTO={forced!r}: expected float32, bfloat16 or float16")
        return forced, "set by DRAFTSMITH_DTYPE_AUTO"
    if device.type == "cuda":
        return "bfloat16", "CUDA"
    if device.type != "cpu":
        return "float32", f"{device.type}: no measured choice"
    cpu = cpu_info()
    flags = cpu["flags"] or {}
    present = [f for f in BF16_FLAGS if flags.get(f)]
    if not present:
        return "float32", "CPU without AMX or AVX512-BF16"
    key = f"{cpu['model']}|{sorted(k for k, v in flags.items() if v)}|{torch.get_num_threads()}|{torch.__version__}"
    with measurement_cache("dtype_auto.json") as cached:
        if key not in cached:
            cached[key] = {"fp32_s": _probe(torch.float32), "bf16_s": _probe(torch.bfloat16)}
        timings = cached[key]
    ratio = timings["bf16_s"] / timings["fp32_s"]
    has = "/".join(present)
    if ratio <= BF16_MIN_GAIN:
        return "bfloat16", f"{has}, bf16 matmul measured {ratio:.2f}x fp32's time"
    return "float32", f"{has}, but bf16 matmul measured {ratio:.2f}x fp32's time (> {BF16_MIN_GAIN})"


__all__ = [
    "BF16_FLAGS",
    "CPU_FLAGS",
    "affinity_cores",
    "auto_dtype",
    "cpu_info",
    "format_cpu",
    "measurement_cache",
    "use_affinity_threads",
]
