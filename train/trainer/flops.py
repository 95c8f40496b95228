"""What a training step costs: FLOPs per token and bytes per GPU, from shapes alone.

Two ways to count, checked against each other in the tests:

- closed forms for Llama-style shapes (`SHAPES`, `bound`): what scripts/flop_bound.py prints for
  targets too large to run here;
- `module_flops`: the same count read off any module tree (a target or a drafter built on the
  meta device), so `draftsmith plan` needs no formula per drafter kind.

Counted per token of a T-token row, as torch's FlopCounterMode counts (2mnk per matmul;
attention as two T x T matmuls, causality ignored). Online distillation runs the frozen target
forward on every batch, then the draft forward and backward (backward ~ 2x forward):

    F_floor    = 2 L P + 2 V d + 4 L T H hd              (the LM head on every row)
    F_target   = 2 L P + 2 V d s + 4 L T H hd            (in training: head at scored rows only)
    draft LM   = 2 L_d P_d + 2 V d_d s + 4 L_d T H_d hd_d
    EAGLE-3    = 2 (3d) d  +  n [2 (2d)(H + 2KV) hd + 2 H hd d + 6 d I + 4 T H hd + 2 d V_draft s]
    bound      = F_floor / (F_target + 3 F_draft)        (of the target's forward-only tokens/s)

with P = d(H + 2KV)hd + H hd d + 3dI a layer's matmul weights, s the fraction of rows scored
(the reply tokens), n the unrolled training-time-test steps (EAGLE-3, Li et al. 2025, sec. 3.2).

No torch at import: the CLI imports this to plan before anything heavy loads.
"""

from __future__ import annotations

from dataclasses import dataclass

# Llama-style shapes (published configs): d, I, L, H, KV, hd, V
SHAPES = {
    "smollm2-135m": dict(d=576, I=1536, L=30, H=9, KV=3, hd=64, V=49152),
    "llama-3.2-1b": dict(d=2048, I=8192, L=16, H=32, KV=8, hd=64, V=128256),
    "llama-3.1-8b": dict(d=4096, I=14336, L=32, H=32, KV=8, hd=128, V=128256),
    "llama-3.3-70b": dict(d=8192, I=28672, L=80, H=64, KV=8, hd=128, V=128256),
}


def layer_weights(c: dict) -> int:
    return c["d"] * (c["H"] + 2 * c["KV"]) * c["hd"] + c["H"] * c["hd"] * c["d"] + 3 * c["d"] * c["I"]


def target_flops(c: dict, T: int, s: float) -> tuple[float, float]:
    """(forward-only floor, the forward inside training) per token."""
    body = 2 * c["L"] * layer_weights(c) + 4 * c["L"] * T * c["H"] * c["hd"]
    return body + 2 * c["V"] * c["d"], body + 2 * c["V"] * c["d"] * s


def draft_lm_flops(c: dict, T: int, s: float) -> float:
    """One forward of a Llama-style causal LM draft, LM head at scored rows only."""
    return 2 * c["L"] * layer_weights(c) + 2 * c["V"] * c["d"] * s + 4 * c["L"] * T * c["H"] * c["hd"]


def eagle3_flops(c: dict, T: int, s: float, steps: int, draft_vocab: int) -> float:
    """One EAGLE-3 forward over `steps` training-time-test steps on target shape `c`."""
    d = c["d"]
    step = (
        2 * 2 * d * (c["H"] + 2 * c["KV"]) * c["hd"]
        + 2 * c["H"] * c["hd"] * d
        + 6 * d * c["I"]
        + 4 * T * c["H"] * c["hd"]
        + 2 * d * draft_vocab * s
    )
    return 2 * 3 * d * d + steps * step


def bound(floor: float, target_in_training: float, draft_forward: float) -> float:
    """Training tokens/s as a fraction of the target's forward-only tokens/s, at equal FLOP rates."""
    return floor / (target_in_training + 3 * draft_forward)


# --- counting a module tree ----------------------------------------------------------------------


@dataclass
class ModuleCost:
    """Per-token forward FLOPs and activation elements of one module tree."""

    flops: float  # forward FLOPs per token
    activations: float  # elements kept for backward per token (inputs + outputs of every matmul)
    vocab_outputs: float  # elements per token of vocabulary-wide outputs (logits), which the loss upcasts
    vocab_unit: float = 0.0  # the largest of them scored at once: one LM head at one unrolled step


def module_cost(model, T: int, scored: float, steps: int = 1, vocab_sizes: tuple[int, ...] = ()) -> ModuleCost:
    """Count `model`'s matmuls, as `module_flops` below, without running it (meta tensors are fine).

    Every `nn.Linear` costs 2 in out per token and keeps its input and output for backward. A
    Linear whose width is a vocabulary in `vocab_sizes` (an LM head) runs at scored rows only.
    Modules named `fc` (EAGLE-3's and DFlash's fusion of the target's features) run once per
    token; everything else runs `steps` times (EAGLE-3's unrolled training-time test). An
    attention block (a module with a `q_proj`) adds 4 T H hd: QK^T and AV. Linear modules a
    drafter borrows from its target without registering them (the LM head EAGLE and DFlash
    score with) are counted too: they run in its forward.
    """
    from torch import nn

    once = per_step = once_act = step_act = vocab = unit = 0.0
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for module in model.modules():  # borrowed, unregistered modules (attach_target's)
        for key, value in vars(module).items():
            if isinstance(value, nn.Linear) and key.startswith("_") and key != "_modules":
                linears.append((key, value))
    for name, m in linears:
        f, a = 2.0 * m.in_features * m.out_features, float(m.in_features + m.out_features)
        if m.out_features in vocab_sizes:
            f, a = f * scored, a * scored
            vocab += m.out_features * scored * (1 if name.rsplit(".", 1)[-1] == "fc" else steps)
            unit = max(unit, m.out_features * scored)
        if name.rsplit(".", 1)[-1] == "fc":
            once, once_act = once + f, once_act + a
        else:
            per_step, step_act = per_step + f, step_act + a
    for m in model.modules():
        q = getattr(m, "q_proj", None)
        if isinstance(q, nn.Linear):
            per_step += 4.0 * T * q.out_features
    return ModuleCost(once + steps * per_step, once_act + steps * step_act, vocab, unit)


def module_flops(model, T: int, scored: float, steps: int = 1, vocab_sizes: tuple[int, ...] = ()) -> float:
    """Forward FLOPs per token of `model` (see `module_cost`)."""
    return module_cost(model, T, scored, steps, vocab_sizes).flops


# --- measuring a device --------------------------------------------------------------------------


def measure_tflops(
    dtype: str = "float32", n: int | None = None, seconds: float = 2.0, device: str = "cpu", products: int | None = None
) -> float:
    """This device's matmul rate (TFLOP/s) for n x n x n matmuls in `dtype`: the rate a plan's
    tokens/s is fed when there is no datasheet figure. Median over timings of `products` matmuls
    each. On a GPU the products must be large (default n 8192) and many between two
    synchronisations (default 16): a 1024^3 product takes microseconds there, so timing it alone
    measures the launch and the synchronisation, not the tensor cores (a fifth of their rate)."""
    import statistics
    import time

    import torch

    cuda = torch.device(device).type == "cuda"
    n = n or (8192 if cuda else 1024)
    products = products or (16 if cuda else 1)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dt = getattr(torch, dtype)
    a, b = torch.randn(n, n, dtype=dt, device=device), torch.randn(n, n, dtype=dt, device=device)
    for _ in range(2):  # warm-up: thread pools, kernels, the allocator
        a @ b
    sync()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        for _ in range(products):
            a @ b
        sync()  # the products queued on the device have finished: the time is theirs
        times.append((time.perf_counter() - t) / products)
    return 2 * n**3 / statistics.median(times) / 1e12


__all__ = [
    "SHAPES",
    "ModuleCost",
    "bound",
    "draft_lm_flops",
    "eagle3_flops",
    "layer_weights",
    "measure_tflops",
    "module_cost",
    "module_flops",
    "target_flops",
]
