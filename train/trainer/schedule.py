"""What a training step trains on and how fast: the data order a resumed run continues exactly
(`EpochShuffle`), the learning-rate schedule (`lr_lambda`) and AdamW's parameter groups
(`param_groups`). Each is built from the recipe alone, so a resumed run rebuilds them as they
were; where the data order stands comes from the checkpoint (`EpochShuffle.skip_next`).
"""

from __future__ import annotations

import math

import torch


class EpochShuffle(torch.utils.data.Sampler):
    """A fresh permutation per epoch from (seed, epoch) alone, optionally skipping a prefix of
    the epoch: a resumed run sees exactly the batches the killed one had not reached.
    accelerate calls set_epoch() on it; batches are cut from consecutive indices and dealt to
    ranks round-robin, so skipping `n` indices skips `n / (batch * world)` steps on every rank."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0
        self.skip_epoch, self.skip = -1, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_next(self, epoch: int, num_indices: int) -> None:
        self.skip_epoch, self.skip = epoch, num_indices

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch)).tolist()
        if self.epoch == self.skip_epoch:
            order = order[self.skip :]
        return iter(order)

    def __len__(self) -> int:
        return self.n


def steps_per_epoch(train_rows: int, batch_size: int, processes: int, grad_accum: int) -> int:
    """Optimizer steps in one pass over the rows: each process takes batch_size rows per micro-batch
    (a last partial batch dropped), and an epoch's last accumulation window steps too (accelerate
    syncs at the end of the loader)."""
    micro_batches = train_rows // (batch_size * processes)
    return max(1, math.ceil(micro_batches / grad_accum))


def run_length(optim, train_rows: int, processes: int) -> tuple[int, int, float]:
    """(max_steps, warmup_steps, epochs the run covers) for the recipe's optim section on this data:
    optim.epochs gives the steps (optim.max_steps, when also set, caps them); optim.warmup_ratio,
    when set, is that share of them."""
    per_epoch = steps_per_epoch(train_rows, optim.batch_size, processes, optim.grad_accum)
    steps = optim.max_steps
    if optim.epochs is not None:
        from_epochs = max(1, math.ceil(optim.epochs * per_epoch))
        steps = from_epochs if steps is None else min(steps, from_epochs)
    warmup = optim.warmup_steps if optim.warmup_ratio is None else round(optim.warmup_ratio * steps)
    return steps, warmup, steps / per_epoch


def lr_lambda(warmup: int, total: int, min_ratio: float):
    """Linear warm-up then cosine decay to `min_ratio` (Loshchilov & Hutter 2017)."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def param_groups(params, lr: float):
    """A task's trainable parameters for AdamW: a list of tensors, or of param groups where a
    group's `lr_multiplier` becomes its own lr (the schedule then scales every group alike)."""
    out = []
    for p in params:
        if isinstance(p, dict) and "lr_multiplier" in p:
            p = {k: v for k, v in p.items() if k != "lr_multiplier"} | {"lr": lr * p["lr_multiplier"]}
        out.append(p)
    return out


__all__ = ["EpochShuffle", "lr_lambda", "param_groups", "run_length", "steps_per_epoch"]
