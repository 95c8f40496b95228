"""Which matmul a few-row forward runs on CPU: `--cpu-matmul auto` measures and chooses.

Speculative decoding pays only when verifying K+1 tokens costs little more than one decode step:
both stream every weight once (a 1.5B model in fp32 is 6 GB per forward). On CPUs without AMX or
AVX512-BF16 the library's default few-row matmul does not: measured on an AMD EPYC with AVX2
only (2 threads, torch 2.13, MKL 2024.2), `F.linear` on 5 rows of Qwen2.5-Coder-1.5B's MLP weight
took 2.9x its one-row time (a 5-token verify 3.05x a step),
because `x @ W.T` with the weight as the transposed right operand takes MKL's small-M path, while
one row takes its GEMV. The same product with the weight as the left operand, `(W @ x.T).T`, is
the skinny GEMM MKL streams well. Candidates (all exact fp32/bf16 products of the same weights,
only the summation order differs, so outputs equal up to argmax ties: the bench checks them):

    linear        torch's F.linear (the default everywhere; one-row calls always take it)
    transposed    (W @ x.T).T through torch.mm: the weight as the left operand

A draft that runs alone (a draft LM: no target features) mostly decodes one row, a pure weight
stream: `choose_draft_dtype` keeps it in bfloat16 where a one-row product of its largest weight
measured faster in bf16 than in the target's dtype (half the bytes: 0.5x on the AVX2 EPYC), which
changes only what it proposes, never the output (the target verifies every token).

`choose_linear_kernel` times each on the model's own largest weight (the MLP's, which dominate a
step) at the verify's row count, against one row, and keeps the fastest; the measurement is
cached per CPU, threads, torch version, shape and dtype like `--dtype auto`'s (infer/hardware.py),
and every report records the choice with its timings. CUDA always keeps `linear`.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from .hardware import cpu_info, measurement_cache


def _transposed(x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if bias is None:
        return torch.mm(weight, x2d.t()).t().contiguous()
    return torch.addmm(bias.unsqueeze(1), weight, x2d.t()).t().contiguous()


KERNELS = {"linear": None, "transposed": _transposed}  # None: nn.Linear's own forward
CHOICES = ("auto", *KERNELS)
MIN_GAIN = 0.9  # a candidate must take at most this fraction of linear's time to be chosen
MAX_ROWS = 64  # verify and tree sizes; longer inputs (prefill) keep the library's GEMM, not measured here


def _forward(kernel):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows == 1 or rows > MAX_ROWS:  # a decode step (every library's GEMV is fast) or a prefill
            return F.linear(x, self.weight, self.bias)
        y = kernel(x.reshape(rows, x.shape[-1]), self.weight, self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return forward


def use_linear_kernel(model: torch.nn.Module, name: str) -> int:
    """Route every nn.Linear of `model` with more than one input row through kernel `name`
    ("linear" restores the default); -> how many layers now use it."""
    if name not in KERNELS:
        from draftsmith.errors import DraftsmithError

        raise DraftsmithError(f"unknown CPU matmul {name!r}: choose one of {', '.join(CHOICES)}")
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.__dict__.pop("forward", None)
            if KERNELS[name] is not None:
                module.forward = _forward(KERNELS[name]).__get__(module)
            count += 1
    return count


def _largest_weight(model: torch.nn.Module) -> torch.Tensor:
    """The biggest decoder-layer weight (an MLP projection): the LM head is excluded, its shape
    is one per model while the layers' repeat, and they make up most of a step."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_w = getattr(head, "weight", None)
    best = None
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight is not head_w and module.weight.device.type != "meta":
            if best is None or module.weight.numel() > best.numel():
                best = module.weight
    if best is None:
        raise ValueError("the model has no linear layer to measure")
    return best


def _time(kernel, x: torch.Tensor, w: torch.Tensor, repeats: int) -> float:
    times = []
    with torch.inference_mode():
        for i in range(repeats + 2):  # the first calls create the library's primitives
            t = time.perf_counter()
            for _ in range(4):  # 4 calls: one weight is ~50 MB, a few ms
                kernel(x, w, None) if kernel is not None else F.linear(x, w)
            if i >= 2:
                times.append(time.perf_counter() - t)
    return statistics.median(times) / 4


def measure(weight: torch.Tensor, rows: int, repeats: int = 9) -> dict:
    """Seconds per product of `weight` [n, d] with 1 row (linear) and with `rows` rows (each
    kernel), fresh random inputs in the weight's dtype."""
    g = torch.Generator().manual_seed(0)
    one = torch.randn(1, weight.shape[1], generator=g).to(weight.dtype)
    many = torch.randn(rows, weight.shape[1], generator=g).to(weight.dtype)
    out = {"one_row_s": _time(None, one, weight, repeats)}
    for name, kernel in KERNELS.items():
        out[f"{name}_s"] = _time(kernel, many, weight, repeats)
    return out


def _machine_key(w: torch.Tensor, what) -> str:
    """The cache key of a measurement on `w`: CPU model and flags, threads, torch, shape, dtype."""
    cpu = cpu_info()
    flags = sorted(k for k, v in (cpu["flags"] or {}).items() if v)
    return f"{cpu['model']}|{flags}|{torch.get_num_threads()}|{torch.__version__}|{tuple(w.shape)}|{w.dtype}|{what}"


def choose_linear_kernel(model: torch.nn.Module, rows: int, device) -> tuple[str, str, dict | None]:
    """(kernel name, why, timings) for `model`'s forwards of `rows` rows on `device`."""
    device = torch.device(device)
    if device.type != "cpu":
        return "linear", f"{device.type}: the library's own kernels", None
    w = _largest_weight(model)
    key = _machine_key(w, rows)
    with measurement_cache("cpu_matmul.json") as cached:
        if key not in cached:
            cached[key] = measure(w, rows)
        timings = cached[key]
    best = min(KERNELS, key=lambda n: timings[f"{n}_s"])
    ratio = timings[f"{best}_s"] / timings["linear_s"]
    shape = "x".join(map(str, w.shape))
    per = ", ".join(f"{n} {timings[f'{n}_s'] / timings['one_row_s']:.2f}x" for n in KERNELS)
    why = f"{rows} rows of a {shape} {str(w.dtype).removeprefix('torch.')} weight vs one row: {per}"
    if best == "linear" or ratio > MIN_GAIN:
        return "linear", why, timings
    return best, why, timings


def choose_draft_dtype(model: torch.nn.Module, device) -> tuple[torch.dtype, str, dict | None]:
    """(dtype, why, timings) for a draft that runs alone: bfloat16 where its one-row product
    measured at most MIN_GAIN of the time it takes in its current dtype, else unchanged."""
    w = _largest_weight(model)
    device = torch.device(device)
    if device.type != "cpu" or w.dtype == torch.bfloat16:
        return w.dtype, f"kept in {str(w.dtype).removeprefix('torch.')}", None
    key = _machine_key(w, "draft")
    with measurement_cache("cpu_matmul.json") as cached:
        if key not in cached:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, w.shape[1], generator=g)
            cached[key] = {
                "own_s": _time(None, x.to(w.dtype), w, 9),
                "bfloat16_s": _time(None, x.bfloat16(), w.bfloat16(), 9),
            }
        timings = cached[key]
    ratio = timings["bfloat16_s"] / timings["own_s"]
    why = f"one row of its {'x'.join(map(str, w.shape))} weight in bfloat16: {ratio:.2f}x the time in {w.dtype}"
    return (torch.bfloat16 if ratio <= MIN_GAIN else w.dtype), why.replace("torch.", ""), timings


__all__ = ["CHOICES", "KERNELS", "choose_draft_dtype", "choose_linear_kernel", "measure", "use_linear_kernel"]
