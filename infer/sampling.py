"""Turning logits into the distribution a decoder samples from.

Speculative sampling is lossless only if the target distribution p and the draft distribution q
are processed *identically* (temperature, top-k, top-p): the output then follows the processed
p, which is exactly what plain sampling with the same settings draws from. Every path in the
runtime therefore goes through `logits_to_probs`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from draftsmith.errors import DraftsmithError


class SamplingError(DraftsmithError, ValueError):
    """A SamplingConfig field out of range: a DraftsmithError (one line) that is still the
    ValueError callers caught before."""


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy (argmax); top_k 0 and top_p 1.0 mean "off"."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        # One line naming the field (a DraftsmithError, also a ValueError): a wrong type or a NaN
        # otherwise fails, or worse samples, deep inside the loop.
        t, k, p = self.temperature, self.top_k, self.top_p
        if not _is_real(t) or not math.isfinite(t) or t < 0:
            raise SamplingError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise SamplingError(f"top_k must be an int >= 0 (0 = off), got {k!r}")
        if not _is_real(p) or not 0.0 < p <= 1.0:  # NaN fails the comparison too
            raise SamplingError(f"top_p must be a number in (0, 1] (1 = off), got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


GREEDY = SamplingConfig()


def logits_to_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Probabilities (float32) over the last dim after temperature, top-k and top-p.

    At temperature 0 the result is the one-hot argmax, so greedy decoding is the T→0 limit of
    the same code path.
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass *before* it already reaches top_p (the top-1 always stays).
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= cfg.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of `probs` ([..., V] -> [...])."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
