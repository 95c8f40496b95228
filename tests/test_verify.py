"""Verification functions against stub logits and against brute-force enumeration (tiny vocab)."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from draftsmith.infer.sampling import SamplingConfig, logits_to_probs
from draftsmith.infer.verify import greedy_chain, speculative_sampling

V = 6


def one_hot_logits(tokens, vocab=V):
    logits = torch.full((len(tokens), vocab), -5.0)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return logits


@pytest.mark.parametrize(
    "draft, target_argmax, expected_n",
    [
        ([1, 2, 3], [4, 2, 3, 5], 0),  # never: first token already wrong
        ([1, 2, 3], [1, 2, 3, 5], 3),  # always: all k plus the bonus
        ([1, 2, 3], [1, 2, 0, 5], 2),  # partly: a later match does not count after a miss
        ([1, 0, 3], [1, 2, 3, 5], 1),
    ],
)
def test_greedy_chain_stub_logits(draft, target_argmax, expected_n):
    n, nxt = greedy_chain(torch.tensor(draft), one_hot_logits(target_argmax))
    assert n == expected_n
    assert int(nxt) == target_argmax[expected_n]  # correction (or bonus) is the target's own


def test_greedy_chain_empty_draft_is_plain_step():
    n, nxt = greedy_chain(torch.tensor([], dtype=torch.long), one_hot_logits([4]))
    assert (n, int(nxt)) == (0, 4)


def test_sampling_identical_draft_always_accepted():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, V, generator=g), -1)
    for _ in range(200):
        draft = torch.multinomial(p[:4], 1, generator=g).flatten()
        n, _ = speculative_sampling(draft, p[:4], p, g)
        assert n == 4


def test_sampling_never_accepted_when_target_gives_zero_mass():
    g = torch.Generator().manual_seed(0)
    p = torch.zeros(3, V)
    p[:, :3] = 1 / 3  # target only ever emits 0..2
    q = torch.zeros(2, V)
    q[:, 5] = 1.0  # draft only ever proposes 5
    for _ in range(100):
        n, nxt = speculative_sampling(torch.tensor([5, 5]), q, p, g)
        assert n == 0 and int(nxt) in (0, 1, 2)


def test_deterministic_draft_rejected_token_never_resampled():
    """One-hot q: after rejecting x the residual is p with x zeroed, so x cannot be the correction."""
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([[0.5, 0.3, 0.2, 0, 0, 0], [1 / 6] * 6])
    seen_n = set()
    for _ in range(300):
        n, nxt = speculative_sampling(torch.tensor([0]), None, p, g)
        seen_n.add(n)
        if n == 0:
            assert int(nxt) != 0
    assert seen_n == {0, 1}


def _tables(seed, k, vocab):
    """Context-dependent target and draft distributions over a tiny vocabulary, keyed by prefix."""
    g = torch.Generator().manual_seed(seed)
    p, q = {}, {}
    for length in range(k + 1):
        for prefix in itertools.product(range(vocab), repeat=length):
            p[prefix] = torch.softmax(2 * torch.randn(vocab, generator=g), -1)
            q[prefix] = torch.softmax(2 * torch.randn(vocab, generator=g), -1)
    return p, q


@pytest.mark.parametrize("deterministic", [False, True])
def test_speculative_sampling_matches_brute_force_target_law(deterministic):
    """One verify step, then the target alone completes k+1 tokens: the joint law of those k+1
    tokens must equal the target's, enumerated exactly over all vocab^(k+1) sequences."""
    k, vocab, n_samples = 2, 3, 30000
    p, q = _tables(0, k, vocab)
    g = torch.Generator().manual_seed(123)
    counts = torch.zeros([vocab] * (k + 1))
    for _ in range(n_samples):
        prefix, draft, qs = (), [], []
        for _i in range(k):
            if deterministic:  # e.g. prompt lookup or greedy drafting: q is one-hot on argmax
                tok = int(q[prefix].argmax())
            else:
                tok = int(torch.multinomial(q[prefix], 1, generator=g))
            draft.append(tok)
            qs.append(q[prefix])
            prefix = prefix + (tok,)
        target_rows = torch.stack([p[tuple(draft[:i])] for i in range(k + 1)])
        n, nxt = speculative_sampling(torch.tensor(draft), None if deterministic else torch.stack(qs), target_rows, g)
        out = tuple(draft[:n]) + (int(nxt),)
        while len(out) < k + 1:  # complete with the target itself
            out = out + (int(torch.multinomial(p[out], 1, generator=g)),)
        counts[out] += 1
    exact = torch.zeros_like(counts)
    for seq in itertools.product(range(vocab), repeat=k + 1):
        exact[seq] = torch.prod(torch.stack([p[seq[:i]][seq[i]] for i in range(k + 1)]))
    stat = chisquare(counts.flatten().numpy(), (exact.flatten() * n_samples).numpy())
    assert stat.pvalue > 1e-3, stat


def test_wrong_rule_fails_the_same_check():
    """The brute-force check has teeth: accepting every draft token gives the draft's law."""
    k, vocab, n_samples = 1, 3, 5000
    p, q = _tables(0, k, vocab)
    g = torch.Generator().manual_seed(5)
    counts = torch.zeros(vocab, vocab)
    for _ in range(n_samples):
        d = int(torch.multinomial(q[()], 1, generator=g))
        nxt = int(torch.multinomial(p[(d,)], 1, generator=g))  # "always accept", then bonus
        counts[d, nxt] += 1
    exact = torch.stack([p[()][a] * p[(a,)] for a in range(vocab)])
    assert chisquare(counts.flatten().numpy(), (exact.flatten() * n_samples).numpy()).pvalue < 1e-6


def test_logits_to_probs_top_k_top_p_and_greedy():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    assert (logits_to_probs(logits, SamplingConfig(temperature=1.0, top_k=2)) > 0).sum() == 2
    full = torch.softmax(logits, -1)
    kept = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_p=0.8))
    # smallest prefix of the sorted distribution with mass >= 0.8
    need = int((full.cumsum(0) < 0.8).sum()) + 1
    assert (kept > 0).sum() == need
    assert torch.allclose(kept[:need], full[:need] / full[:need].sum())
    assert logits_to_probs(logits, SamplingConfig()).tolist() == [1.0, 0, 0, 0, 0]
    hot = logits_to_probs(logits, SamplingConfig(temperature=0.5))
    assert torch.allclose(hot, torch.softmax(logits / 0.5, -1))
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0.0)
