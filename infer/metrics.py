"""Acceptance metrics, named and defined as vLLM reports them.

- drafts: verification steps that had at least one drafted token;
- drafted_tokens / accepted_tokens: totals over those steps;
- draft_acceptance_rate = accepted_tokens / drafted_tokens;
- mean_acceptance_length (τ) = 1 + accepted_tokens / drafts: tokens emitted per target forward,
  counting the target's bonus/correction token (plain decoding scores exactly 1.00);
- per_position_acceptance[i] = drafts whose token at position i (a tree: depth i+1) was accepted / drafts;
  for trees, drafted_tokens counts every node verified.

Counts are taken from verification, before any truncation at EOS / stop / max tokens, so they
measure the drafter rather than where the request happened to end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SpecMetrics:
    drafts: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def update(self, num_drafted: int, num_accepted: int, depth: int | None = None) -> None:
        """One verification step: `num_drafted` tokens (a tree's nodes) verified, `num_accepted`
        kept; positions are depths, so a tree of depth d has d of them (a chain: num_drafted)."""
        if num_drafted == 0:
            return
        self.drafts += 1
        self.drafted_tokens += num_drafted
        self.accepted_tokens += num_accepted
        positions = num_drafted if depth is None else depth
        if len(self.accepted_per_position) < positions:
            self.accepted_per_position += [0] * (positions - len(self.accepted_per_position))
        for i in range(num_accepted):
            self.accepted_per_position[i] += 1

    def merge(self, other: SpecMetrics) -> SpecMetrics:
        out = SpecMetrics(self.drafts, self.drafted_tokens, self.accepted_tokens, list(self.accepted_per_position))
        n = max(len(out.accepted_per_position), len(other.accepted_per_position))
        out.accepted_per_position += [0] * (n - len(out.accepted_per_position))
        for i, a in enumerate(other.accepted_per_position):
            out.accepted_per_position[i] += a
        out.drafts += other.drafts
        out.drafted_tokens += other.drafted_tokens
        out.accepted_tokens += other.accepted_tokens
        return out

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / self.drafts for a in self.accepted_per_position] if self.drafts else []

    def as_dict(self) -> dict:
        return {
            "drafts": self.drafts,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "draft_acceptance_rate": self.draft_acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
        }


def pooled_ratio(num, den) -> tuple[float, float]:
    """(sum(num) / sum(den), its standard error with each (num_i, den_i) pair a cluster): a rate
    pooled over prompts, e.g. accepted tokens per draft, whose steps within one prompt are not
    independent. The ratio estimator's error, sqrt(n / (n - 1) * sum((a_i - r d_i)^2)) / sum(d_i);
    nan where nothing was drafted, and for the error with fewer than two clusters."""
    num, den = [float(x) for x in num], [float(x) for x in den]
    total = sum(den)
    if total <= 0:
        return math.nan, math.nan
    r = sum(num) / total
    if len(den) < 2:
        return r, math.nan
    n = len(den)
    return r, math.sqrt(n / (n - 1) * sum((a - r * d) ** 2 for a, d in zip(num, den))) / total


def paired_ratio_difference(num_a, den_a, num_b, den_b) -> tuple[float, float]:
    """(r_a - r_b, its standard error) for two pooled rates measured on the same clusters (the same
    prompts decoded by two drafts): the delta method on each ratio's per-cluster residuals, paired,
    so what the prompts share (an easy prompt is easy for both) cancels. Far tighter than the two
    unpaired errors combined when the drafts agree on which prompts are easy; nan as pooled_ratio."""
    if not len(num_a) == len(den_a) == len(num_b) == len(den_b):
        raise ValueError("a paired difference needs both rates over the same clusters")
    ra, _ = pooled_ratio(num_a, den_a)
    rb, _ = pooled_ratio(num_b, den_b)
    if math.isnan(ra) or math.isnan(rb):
        return math.nan, math.nan
    n = len(den_a)
    if n < 2:
        return ra - rb, math.nan
    ta, tb = float(sum(den_a)), float(sum(den_b))
    e = [(a - ra * d) / ta - (b - rb * f) / tb for a, d, b, f in zip(num_a, den_a, num_b, den_b)]
    return ra - rb, math.sqrt(n / (n - 1) * sum(x * x for x in e))
