"""Adaptive K (infer/adaptive.py): the policy's choices from known acceptance and costs, and the
engine under it for every kind: greedy output equal to plain decoding, the target's law kept,
plain steps chosen when drafting cannot pay."""

from __future__ import annotations

import itertools
import json
import time
import types

import pytest
import torch
from lawtest import chisquare_pvalue, engine_samples, exact_law

import draftsmith.infer.engine as engine_module
from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.infer.adaptive import TREE, AdaptiveK
from draftsmith.infer.engine import adaptive_ceiling
from draftsmith.infer.proposal import Drafter, Proposal, speculative_cap
from draftsmith.kinds import KINDS

PROMPT = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 31, 7, 8, 9]
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)


def run(policy: AdaptiveK, accept, cost, steps: int) -> list[int]:
    """Drive the policy `steps` times: accept(k) -> drafts kept, cost(k) -> seconds."""
    for _ in range(steps):
        k = policy.choose()
        policy.observe(k, accept(k), cost(k))
    return policy.history


# --- the policy --------------------------------------------------------------------------------


def test_a_draft_that_never_pays_decodes_plainly_and_probes_less_and_less():
    policy = AdaptiveK(k_max=8, k_start=4)
    history = run(policy, accept=lambda k: 0, cost=lambda k: 0.1 + 0.05 * k, steps=200)
    assert history[:3] == [4, 0, 0]  # the default K, then plain steps: both ends of the cost line
    drafted = [i for i, k in enumerate(history) if k]
    assert history.count(0) >= 190
    assert all(history[i] == 1 for i in drafted[1:])  # probes draft one token
    gaps = [b - a - 1 for a, b in zip(drafted, drafted[1:])]
    assert gaps[:4] == [8, 16, 32, 64] and all(g == 64 for g in gaps[4:])


def test_a_probe_that_hits_brings_drafting_back():
    policy = AdaptiveK(k_max=4, k_start=4)
    good = {"on": False}
    history = run(policy, lambda k: k if good["on"] else 0, lambda k: 0.1 + 0.01 * k, steps=40)
    assert history[-1] == 0
    good["on"] = True  # the text turned predictable
    history = run(policy, lambda k: k, lambda k: 0.1 + 0.01 * k, steps=80)
    assert history[-10:] == [4] * 10


def test_a_probe_whose_token_is_accepted_but_does_not_pay_still_backs_off():
    """Drafting one token costs 2.5 plain steps and the probes' tokens are always accepted: a
    step drafting k then emits 1 + k tokens but costs more than 1 + k plain steps, so no K pays,
    and the hits must not bring the probes back every 8 steps."""
    policy = AdaptiveK(k_max=8, k_start=4)
    history = run(policy, accept=lambda k: k, cost=lambda k: 0.1 + 0.15 * k, steps=900)
    drafted = [i for i, k in enumerate(history) if k]
    gaps = [b - a - 1 for a, b in zip(drafted, drafted[1:])]
    # a probe costs 1.5 plain steps more than a plain step: within 1% of the time at 150 steps apart;
    # the first hit is followed by one steadily timed drafted token (the gap of 0), once
    assert gaps[:7] == [8, 0, 16, 32, 64, 128, 150] and all(g == 150 for g in gaps[7:]), gaps


def test_a_cold_first_plain_step_does_not_keep_a_losing_draft_running():
    """The first plain step is slow (kernels warming up: 10x), the draft never right: timed once,
    plain decoding would look ten times dearer than it is and the draft would run on; the second
    plain step outvotes the cold one and the policy drafts only its probes."""
    policy = AdaptiveK(k_max=8, k_start=4)
    timed = {"plain": 0}

    def cost(k):
        if k == 0:
            timed["plain"] += 1
            return 1.0 if timed["plain"] == 1 else 0.1
        return 0.1 + 0.05 * k

    history = run(policy, accept=lambda k: 0, cost=cost, steps=120)
    assert history[:3] == [4, 0, 0] and policy.cost(0) == pytest.approx(0.1)
    assert [k for k in history[3:] if k] == [1, 1, 1]  # the probes, after 8, 16 and 32 plain steps


@pytest.mark.parametrize(("cost_of_one", "drafts"), [(0.1942, False), (0.16, True)])
def test_drafting_needs_a_margin_over_plain_decoding(cost_of_one, drafts):
    """One drafted token, always accepted, emits 2 tokens: at 0.1942 s a step that is at most 3%
    more tokens per second than plain decoding at 0.1 s (inside the margin: plain, but for
    probes), at 0.16 s up to 25% more (drafted, once the probes have shown the acceptance)."""
    policy = AdaptiveK(k_max=1, k_start=1)
    history = run(policy, accept=lambda k: min(k, 1), cost=lambda k: cost_of_one if k else 0.1, steps=120)
    if drafts:
        assert history[-20:].count(1) >= 18  # a plain step every 16 drafted ones re-times plain decoding
    else:
        assert history[-20:].count(0) >= 19 and history.count(1) <= 6


def test_a_drafted_step_never_looks_cheaper_than_a_plain_one_plus_its_drafting():
    """Plain steps timed on a slow stretch (36.8 ms) and a one-token draft timed on a fast one
    (36.5 ms, 3 ms of it drafting): the draft would look free. Its cost is floored at the plain
    cost plus its own drafting, so with a draft right 7% of the time plain decoding wins."""
    policy = AdaptiveK(k_max=4, k_start=1)
    policy.observe(0, 0, 0.0368)
    policy.observe(1, 0, 0.0365, draft_seconds=0.003)
    assert policy.cost(1) == pytest.approx(0.0398)
    policy.observe(2, 0, 0.060, draft_seconds=0.006)
    assert policy.cost(2) == pytest.approx(0.060)  # measured above the floor: kept
    policy._reached, policy._accepted = [100.0, 7.0, 0.5, 0.0], [7.0, 0.5, 0.0, 0.0]
    assert policy.rate(1) < policy.rate(0)


def test_its_speed_is_within_5_percent_of_the_best_fixed_k():
    """Each step the draft is right for L tokens in a row (L cycling over a fixed pattern), so a
    chain of k keeps min(L, k); drafting and verifying k costs 0.1 + 0.03 k. Tokens per second over
    a long run, against every fixed K run on the same pattern."""
    lengths = [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 1, 9, 2, 3]

    def speed(choose, steps=600):
        tokens = seconds = 0.0
        pattern = itertools.cycle(lengths)
        for _ in range(steps):
            k = choose()
            kept = min(next(pattern), k)
            tokens, seconds = tokens + kept + 1, seconds + 0.1 + 0.03 * k
            yield_ = (k, kept, 0.1 + 0.03 * k)
            observe(*yield_)
        return tokens / seconds

    observe = lambda *a: None  # noqa: E731 -- fixed K learns nothing
    fixed = {k: speed(lambda k=k: k) for k in range(9)}
    best = max(fixed, key=fixed.get)
    assert 0 < best < 8  # the pattern makes a middle K the best: a real choice
    policy = AdaptiveK(k_max=8, k_start=4)
    observe = policy.observe
    assert speed(policy.choose) >= 0.95 * fixed[best]


def test_a_probe_dear_only_by_its_catching_up_does_not_keep_a_paying_draft_off():
    """A drafter that catches up on the plain steps before a drafting step (an EAGLE head's
    feature rows, a draft LM's cache) makes every probe dearer than a step that drafts after a
    drafted one: 0.004 s per plain step caught up. For 200 steps the draft is never right (the
    policy decodes plainly, its probes backing off to 64 steps apart); then its first token is
    right one step in three, and drafting one token every step pays 1.33 tokens for 0.107 s
    against plain's 1 for 0.1 (deeper tokens are never right, and cost 0.02 s each). Judged by its
    probes alone the draft never pays again; the policy must time it steadily and draft, within
    5% of drafting one token every step over that stretch."""

    def speed(choose, observe, steps=1100, hard=200):
        tokens = seconds = 0.0
        pattern, plain_run = itertools.cycle([1, 0, 0]), 0
        for step in range(steps):
            k = choose()
            kept = 0 if step < hard else min(next(pattern), k)
            cost = 0.1 if k == 0 else 0.107 + 0.02 * (k - 1) + 0.004 * (plain_run if plain_run > 1 else 0)
            plain_run = plain_run + 1 if k == 0 else 0
            if step >= hard:
                tokens, seconds = tokens + kept + 1, seconds + cost
            observe(k, kept, cost)
        return tokens / seconds

    fixed_one = speed(lambda: 1, lambda *a: None)
    policy = AdaptiveK(k_max=4, k_start=4)
    adaptive = speed(policy.choose, policy.observe)
    assert fixed_one > 1.15 * 10.0  # drafting one token every step pays (plain: 10 tokens/s)
    assert adaptive >= 0.95 * fixed_one, (adaptive, fixed_one, policy.history[-40:])
    assert sum(1 for k in policy.history[-300:] if k) > 250  # it drafts, it does not idle on probes


def test_costs_of_an_untried_k_are_interpolated_between_measured_ones():
    policy = AdaptiveK(k_max=8, k_start=4)
    policy.observe(4, 0, 0.3)
    policy.observe(0, 0, 0.1)
    assert policy.cost(2) == pytest.approx(0.2)
    assert policy.cost(8) == pytest.approx(0.5)  # extrapolated from the two highest
    assert AdaptiveK(k_max=2, k_start=1).cost(1) is None


# A step's cost in plain steps by K, as the loop timed it on an AVX2-only EPYC (Qwen2.5-Coder-1.5B
# verifying, its 0.5B drafting at 0.4 of a step per token, fp32): a 4-row verify is cheaper there
# than a 3-row one, so K = 3 costs less than K = 2 and a line through K = 2 and 4 prices it dear.
AVX2_QWEN_COSTS = {0: 1.0, 1: 1.69, 2: 2.39, 3: 2.2, 4: 2.93, 5: 3.57, 6: 4.2}


def speed_over_best_fixed_k(alpha: float, seed: int, costs: dict[int, float], steps: int = 350) -> float:
    """The policy's tokens per unit time over the best fixed K's (or plain's), every position
    accepted with chance `alpha`, each step timed with ±3% noise, drafting timed at 0.4 of a plain
    step per token."""
    import random

    rng = random.Random(seed)
    policy = AdaptiveK(k_max=6, k_start=4)
    tokens = spent = 0.0
    for _ in range(steps):
        k = policy.choose()
        kept = 0
        while kept < k and rng.random() < alpha:
            kept += 1
        policy.observe(k, kept, 0.1 * costs[k] * rng.uniform(0.97, 1.03), 0.04 * k if k else None)
        tokens, spent = tokens + 1 + kept, spent + costs[k]
    best = max(sum(alpha**i for i in range(k + 1)) / c for k, c in costs.items())
    return tokens / spent / best


@pytest.mark.parametrize("alpha, floor", [(0.85, 0.94), (0.9, 0.955)])
def test_a_k_whose_cost_the_line_hides_is_timed_where_its_best_case_pays(alpha, floor):
    """Interpolated between the timed K = 2 and K = 4, K = 3 looks dear and would never be chosen,
    so never timed: the policy tries a K not yet timed where its expected tokens over the least it
    can cost (a plain step and its drafting) beat the best choice, and finds K = 3 (over 20
    seeded texts, 0.95 and 0.97 of the best fixed K; without the try the same texts read 0.92 and 0.94)."""
    ratios = [speed_over_best_fixed_k(alpha, seed, AVX2_QWEN_COSTS) for seed in range(20)]
    assert sum(ratios) / len(ratios) >= floor, ratios


def test_a_useless_draft_tries_no_k_it_has_not_timed():
    """A draft whose tokens are never kept: its best case never beats a plain step, so the only
    drafted steps are the first one and the probes (one token each)."""
    policy = AdaptiveK(k_max=6, k_start=4)
    for _ in range(300):
        k = policy.choose()
        policy.observe(k, 0, 0.1 * AVX2_QWEN_COSTS[k], 0.04 * k if k else None)
    assert policy.history[0] == 4 and set(policy.history[1:]) == {0, 1}, policy.history


def test_a_tree_drafter_chooses_between_its_tree_and_a_plain_step():
    policy = AdaptiveK(k_max=16, k_start=4, tree=True)
    history = run(policy, lambda k: 3 if k == TREE else 0, lambda k: 0.12 if k == TREE else 0.1 + 0.01 * k, steps=60)
    assert history[:3] == [TREE, 0, 0] and history.count(TREE) >= 50
    chains = [k for k in history if k not in (0, TREE)]
    assert chains[0] == 1 and len(chains) <= 4  # tries beside the tree (first one token): chains never pay here
    assert history[-5:] == [TREE] * 5
    assert policy.summary()["k_counts"]["tree"] == history.count(TREE)
    policy = AdaptiveK(k_max=16, k_start=4, tree=True)
    history = run(policy, lambda k: 0, lambda k: 0.3 if k == TREE else 0.1, steps=20)
    assert history[1:9] == [0] * 8 and history[9] == 1  # then a probe: one drafted token, not a tree


def test_a_tree_drafter_probe_that_hits_brings_the_tree_back():
    policy = AdaptiveK(k_max=16, k_start=4, tree=True)
    good = {"on": False}
    run(policy, lambda k: (3 if k == TREE else 1) if good["on"] else 0, lambda k: 0.3 if k == TREE else 0.1, 10)
    assert policy.history == [TREE] + [0] * 8 + [1]  # the tree, 8 plain steps, then a probe (it kept nothing)
    good["on"] = True
    history = run(policy, lambda k: 3 if k == TREE else 1, lambda k: 0.15 if k == TREE else 0.1 + 0.01 * k, 60)
    assert TREE in history[-30:] and history[-5:] == [TREE] * 5


def test_a_tree_drafter_whose_probes_hit_now_and_then_but_whose_tree_is_dear_still_backs_off():
    """As a weak EAGLE head on a CPU without fast few-row products: one probe in four keeps its
    token, a 17-token tree costs 3.6 plain steps and keeps one token in nine tries, a chain never
    pays. Each hit tries the tree once, and that losing try (not the hit) decides the back-off, so
    the probes stay far apart and the whole run keeps 99% of plain speed (restarting the back-off
    at every hit kept 98%)."""
    policy = AdaptiveK(k_max=8, k_start=4, tree=True)
    seen = {"probes": 0, "hits": 0}

    def accept(k):
        if k == 1:
            seen["probes"] += 1
            hit = seen["probes"] % 4 == 0
            seen["hits"] += hit
            return int(hit)
        return int(k == TREE and seen["probes"] % 9 == 0)

    cost = lambda k: {0: 0.1, TREE: 0.36}.get(k, 0.12 + 0.01 * k)  # noqa: E731
    tokens = seconds = 0.0
    for _ in range(3000):
        k = policy.choose()
        kept = accept(k)
        policy.observe(k, kept, cost(k))
        tokens, seconds = tokens + 1 + kept, seconds + cost(k)
    history = policy.history
    drafted = [i for i, k in enumerate(history) if k]
    gaps = [b - a - 1 for a, b in zip(drafted, drafted[1:])]
    assert gaps[:4] == [8, 16, 32, 64]
    assert all(g == 0 or g >= 64 for g in gaps[4:]), gaps  # 0: the tree's try right after a hit
    assert history.count(TREE) == 1 + seen["hits"]  # the first step, then one try per hit
    assert sum(1 for k in history if k not in (0, TREE)) == seen["probes"]  # every chain step was a probe
    assert tokens * cost(0) / seconds >= 0.99


def test_a_tree_drafter_drafts_chains_where_they_beat_its_tree():
    """The tree keeps 1 token for 3 plain steps' time; a chain of k keeps min(k, 2) for a little
    more than a plain step: the policy settles on chains of about 2-3 and still tries the tree."""
    policy = AdaptiveK(k_max=8, k_start=4, tree=True)
    history = run(policy, lambda k: 1 if k == TREE else min(k, 2), lambda k: 0.3 if k == TREE else 0.1 + 0.01 * k, 300)
    late = history[100:]
    assert sum(1 for k in late if k in (2, 3)) >= 0.8 * len(late)
    assert 1 <= late.count(TREE) <= 0.1 * len(late)  # tried now and then, never kept


def test_a_tree_drafter_comes_back_to_its_tree_when_it_starts_to_pay():
    policy = AdaptiveK(k_max=8, k_start=4, tree=True)
    tree_good = {"on": False}
    cost = lambda k: 0.2 if k == TREE else 0.1 + 0.01 * k  # noqa: E731
    run(policy, lambda k: (6 if tree_good["on"] else 0) if k == TREE else min(k, 2), cost, 150)
    assert policy.history[-10:].count(TREE) <= 1
    tree_good["on"] = True  # the text turned predictable along the tree's side branches
    history = run(policy, lambda k: 6 if k == TREE else min(k, 2), cost, 200)
    assert history[-10:].count(TREE) >= 8


# --- the engine under the policy ------------------------------------------------------------------


class Scripted(AdaptiveK):
    """A policy that cycles through fixed K (plain steps among them), whatever it measures: the
    drafter must stay in step with the target across plain steps of any length."""

    script = (None, 0, 0, 1, 0, 2, 0, 0, 0, None, 1, 0)  # None: the K the engine started with

    def choose(self) -> int:
        k = self.script[len(self.history) % len(self.script)]
        k = (TREE if self.tree else self.k_start) if k is None else k  # a tree drafter drafts chains too
        self.history.append(k)
        return k


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(engine_module, "AdaptiveK", Scripted)


def k_for(drafter) -> int:
    return min(3, speculative_cap(drafter) or 3)


@pytest.mark.parametrize("name", list(KINDS))
def test_greedy_output_equals_plain_across_plain_and_drafted_steps(name, tiny_target, tiny, scripted):
    _, _, drafter = tiny(name)
    engine = Engine(tiny_target, drafter, k_for(drafter), adaptive=True)
    plain = engine.generate(PROMPT, 30, speculative=False, eos_token_ids=())
    spec = engine.generate(PROMPT, 30, eos_token_ids=())
    assert spec.tokens == plain.tokens
    chosen = spec.extra["adaptive_k"]["k_per_step"]
    assert 0 in chosen and any(k for k in chosen) and spec.metrics.drafts > 0


@pytest.mark.parametrize("name", list(KINDS))
def test_sampled_output_keeps_the_target_law_across_plain_and_drafted_steps(name, tiny_target, tiny, scripted):
    _, _, drafter = tiny(name)
    prompt = [40, 41, 42, 43, 40, 41, 42, 43]
    law = exact_law(tiny_target, prompt, 3, SAMPLING)
    engine = Engine(tiny_target, drafter, min(2, k_for(drafter)), adaptive=True)
    counts, _, drafted = engine_samples(engine, prompt, law, SAMPLING, 300)
    assert drafted > 0
    assert chisquare_pvalue(counts, law) > 1e-3


def test_the_real_policy_keeps_greedy_equality_and_the_law(tiny_target, tiny):
    _, _, drafter = tiny("draft_lm")
    engine = Engine(tiny_target, drafter, adaptive=True)
    assert engine.k == adaptive_ceiling(drafter) == 2 * engine.k_start
    for prompt in (PROMPT, [5, 40, 41, 42, 43, 9, 12, 5, 40]):
        assert (
            engine.generate(prompt, 40, eos_token_ids=()).tokens
            == engine.generate(prompt, 40, speculative=False, eos_token_ids=()).tokens
        )
    prompt = [40, 41, 42, 43, 40, 41, 42, 43]
    law = exact_law(tiny_target, prompt, 3, SAMPLING)
    counts, _, drafted = engine_samples(engine, prompt, law, SAMPLING, 300)
    assert drafted > 0 and chisquare_pvalue(counts, law) > 1e-3


class VirtualClock:
    """The engine's clock in the tests below: time passes only by the costs they model (a target
    forward 10 ms + 0.5 ms a token, a drafter's own), so the policy's choices follow those costs
    and not how busy the machine running the tests is."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch, tiny_target):
    clock = VirtualClock()
    monkeypatch.setattr(engine_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    forward = tiny_target.forward_hidden

    def timed_forward(input_ids, *args, **kwargs):
        clock.advance(0.010 + 0.0005 * input_ids.shape[1])
        return forward(input_ids, *args, **kwargs)

    monkeypatch.setattr(tiny_target, "forward_hidden", timed_forward)
    return clock


class Useless(Drafter):
    """Drafts a token the target never picks, and takes 20 ms to do it: no K pays."""

    kind = "stub"

    def __init__(self, bad: int, clock: VirtualClock):
        self.bad, self.clock = bad, clock

    def start(self, prompt, max_length, hidden=None):
        pass

    def propose(self, seq, k, sampling, generator=None, tree=None):
        self.clock.advance(0.02)
        return Proposal(torch.full((k,), self.bad, dtype=torch.long, device=seq.device))

    def accept(self, num_accepted, hidden=None):
        pass


class Oracle(Useless):
    """Drafts the target's own greedy continuation, at no cost: the most K pays."""

    def __init__(self, reference: list[int], prompt_len: int):
        self.reference, self.prompt_len = reference, prompt_len

    def propose(self, seq, k, sampling, generator=None, tree=None):
        at = seq.shape[1] - self.prompt_len
        return Proposal(torch.tensor(self.reference[at : at + k] or [0], device=seq.device)[:k])


def test_plain_steps_are_chosen_when_drafting_cannot_pay(tiny_target, clock):
    plain = Engine(tiny_target).generate(PROMPT, 64, eos_token_ids=()).tokens
    seen = torch.zeros(tiny_target.vocab_size)
    seen[plain] = 1
    useless = Useless(int(seen.argmin()), clock)  # a token the greedy continuation never contains
    out = Engine(tiny_target, useless, 4, adaptive=True).generate(PROMPT, 64, eos_token_ids=())
    assert out.tokens == plain
    chosen = out.extra["adaptive_k"]["k_per_step"]
    assert chosen[:2] == [4, 0]
    assert chosen.count(0) >= 0.85 * len(chosen)


def test_what_one_generation_learned_carries_to_the_next(tiny_target, clock):
    """A draft found useless on one prompt is not drafted at length again on the next one (the
    policy's costs, acceptance and probe back-off live as long as the engine); a new engine
    starts afresh."""
    policy = AdaptiveK(k_max=8, k_start=4)
    run(policy, accept=lambda k: 0, cost=lambda k: 0.1 + 0.05 * k, steps=100)
    policy.new_generation()
    again = run(policy, accept=lambda k: 0, cost=lambda k: 0.1 + 0.05 * k, steps=30)
    assert again[0] == 0 and again.count(0) >= 29  # no restart at K=4, at most one probe

    plain = Engine(tiny_target).generate(PROMPT, 48, eos_token_ids=()).tokens
    seen = torch.zeros(tiny_target.vocab_size)
    seen[plain] = 1
    engine = Engine(tiny_target, Useless(int(seen.argmin()), clock), 4, adaptive=True)
    first = engine.generate(PROMPT, 48, eos_token_ids=())
    second = engine.generate(PROMPT, 48, eos_token_ids=())
    assert first.tokens == second.tokens == plain
    assert first.extra["adaptive_k"]["k_per_step"][:2] == [4, 0]
    chosen = second.extra["adaptive_k"]["k_per_step"]
    assert chosen[0] == 0 and chosen.count(0) >= len(chosen) - 1
    fresh = Engine(tiny_target, Useless(int(seen.argmin()), clock), 4, adaptive=True)
    fresh = fresh.generate(PROMPT, 8, eos_token_ids=())
    assert fresh.extra["adaptive_k"]["k_per_step"][:2] == [4, 0]


def test_a_perfect_draft_drafts_long_chains(tiny_target, clock):
    plain = Engine(tiny_target).generate(PROMPT, 80, eos_token_ids=()).tokens
    oracle = Oracle(plain, len(PROMPT))
    out = Engine(tiny_target, oracle, 8, adaptive=True).generate(PROMPT, 80, eos_token_ids=())
    assert out.tokens == plain
    drafted = [k for k in out.extra["adaptive_k"]["k_per_step"] if k]
    assert sum(drafted) / len(drafted) >= 4
    assert out.metrics.mean_acceptance_length >= 4


def test_adaptive_k_is_refused_with_lossy_verification(tiny_target, tiny):
    _, _, drafter = tiny("medusa")
    with pytest.raises(DraftsmithError, match="adaptive K needs lossless verification"):
        Engine(tiny_target, drafter, 2, verification="typical-lossy", adaptive=True)


def test_the_adaptive_ceiling_is_the_cap_or_twice_the_default(tiny_target, tiny):
    for name in KINDS:
        _, _, drafter = tiny(name)
        cap = speculative_cap(drafter)
        assert adaptive_ceiling(drafter) == (cap if cap is not None else 2 * Engine(tiny_target, drafter).k)


# --- the commands -------------------------------------------------------------------------------

TINY = ["--target", "tiny-random", "--quiet", "--no-hf", "--num-prompts", "2", "--max-new-tokens", "16"]


def test_bench_runs_adaptive_k_beside_the_fixed_k_unless_k_is_given(tiny_cache, tmp_path, capsys):
    from draftsmith.cli import main

    out = tmp_path / "a.json"
    assert main(["bench", *TINY, "--draft", "truncated:2", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["methods"]) == {"plain", "speculative", "speculative_fixed_k"}
    assert all(m["outputs_match_plain"] for m in r["methods"].values())
    a = r["adaptive_k"]
    assert a["k_max"] == r["num_speculative_tokens"] == 8  # no cap: twice the default K
    assert r["fixed_k"]["num_speculative_tokens"] == 4 and r["fixed_k"]["predicted_speedup"] > 0
    assert sum(a["k_counts"].values()) == sum(len(steps) for steps in a["k_per_step"])
    assert all(0 <= k <= 8 for steps in a["k_per_step"] for k in steps)
    assert "adaptive K (0..8" in capsys.readouterr().out

    fixed = tmp_path / "f.json"
    assert main(["bench", *TINY, "--draft", "truncated:2", "-k", "3", "--json", str(fixed)]) == 0
    r = json.loads(fixed.read_text())
    assert "adaptive_k" not in r and set(r["methods"]) == {"plain", "speculative"}
    assert r["num_speculative_tokens"] == 3

    ceiling = tmp_path / "c.json"
    assert main(["bench", *TINY, "--draft", "truncated:2", "-k", "3", "--adaptive-k", "--json", str(ceiling)]) == 0
    r = json.loads(ceiling.read_text())
    assert r["adaptive_k"]["k_max"] == 3 and r["fixed_k"]["num_speculative_tokens"] == 3


def test_generate_reports_the_k_it_drafted(tiny_cache, capsys):
    from draftsmith.cli import main

    args = ["generate", "--target", "tiny-random", "--draft", "truncated:2", "--max-new-tokens", "12", "abcabc"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert summary["adaptive_k"]["k_max"] == 8 and sum(summary["adaptive_k"]["k_counts"].values()) >= 1
    assert main([*args, "--no-adaptive-k"]) == 0
    summary = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert summary["num_speculative_tokens"] == 4 and "adaptive_k" not in summary


class StandInEvent:
    """A CUDA event on the host clock; `done` says whether the device has passed it."""

    done = False

    def record(self):
        self.t = time.perf_counter()

    def query(self):
        return self.done

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3  # ms, as torch.cuda.Event


def test_the_event_clock_reads_a_step_only_once_the_device_has_passed_it():
    from draftsmith.infer.adaptive import EventClock

    events = []

    def make():
        events.append(StandInEvent())
        return events[-1]

    clock = EventClock(make)
    clock.start()
    assert clock.stop(4) == []  # nothing earlier
    clock.start()
    assert clock.stop(0) == []  # step one's end event not passed yet: nothing read, nothing waited for
    for e in events:
        e.done = True
    clock.start()
    read = clock.stop(2)
    assert [k for k, _ in read] == [4, 0] and all(s >= 0 for _, s in read)
    policy = AdaptiveK(k_max=4, k_start=4)
    for k, s in read:
        policy.observe_cost(k, s + 0.1)
    assert set(policy._cost) == {4, 0}


def test_a_neighbour_of_the_best_k_is_timed_again_so_one_cold_sample_does_not_stand():
    """The draft is right for exactly 4 tokens a step, so K=4 is the best; its only cost sample
    was a cold first step ten times its real cost. Trying a neighbour of the chosen K now and then
    times K=4 again, and it takes over."""
    policy = AdaptiveK(k_max=8, k_start=4)
    first = {"cold": True}

    def timed(k):
        real = 0.1 + 0.02 * k
        if k == 4 and first["cold"]:
            first["cold"] = False
            return 10 * real
        return real

    history = run(policy, accept=lambda k: min(k, 4), cost=timed, steps=400)
    assert history[-100:].count(4) >= 80
    others = [k for k in history[-100:] if k != 4]
    assert others and set(others) <= {3, 5, 6}  # near the best, now and then
