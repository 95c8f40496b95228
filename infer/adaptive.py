"""Adaptive speculation: each step drafts the number of tokens with the most expected tokens per
second, K = 0 (a plain step) included.

A chain of k drafted tokens emits in expectation

    E(k) = 1 + Σ_{i=1..k} Π_{j=1..i} α_j

tokens (Leviathan et al. 2023, eq. 1, with a rate per position), where α_j is the chance that
position j is accepted once 1..j-1 were. It costs t_draft(k) + t_verify(k); K = 0 costs one
plain step and emits one token. Each step picks argmax_k E(k) / cost(k) from what has been
measured so far, over this generation and the engine's earlier ones (a server's running
statistics; transformers' assistant likewise keeps its number of assistant tokens across calls):

- rates: per position, accepted / reached over the drafted steps, decayed so that the recent
  text counts most (acceptance moves with the content: code, prose, a quoted prompt); a
  position reached rarely leans on the one before it;
- costs: the loop's own timings of drafting and verifying, the lower median of the last few per k
  (a cold first step, slow while the kernels warm up, is outvoted by the second); a k not yet
  run is interpolated between measured ones (linear in k), so choosing it measures it. Every
  `explore_every` drafted steps the step drafts one fewer or one more token than the best K
  (alternately, fewer first; from K = 1 the one fewer is a plain step): a neighbour's cost
  measured once, on a cold first step, would otherwise stand forever, since a K never chosen is
  never timed again. A K not yet timed is also tried where its best case pays: its expected
  tokens over a plain step plus its drafting (at the cheapest drafted token timed) beat the best
  choice by `min_gain`; a CPU's verify cost is not linear in its rows, and a line through two
  timed K can price a cheap one dear.

A K is drafted only where its expected rate beats plain decoding's by 5% (`min_gain`): below
that, the error of rates estimated from a few steps outweighs the gain. When no K pays, the
loop decodes plainly and probes with one drafted token now and then (every 8 plain steps,
backing off to 64, or to as many as keep the probes within 1% of the time where a probe is dear,
while the probes do not bring drafting back: a probe whose token was accepted but whose rate
still loses to plain decoding backs off too): a useless draft then costs about a percent of the
plain speed, not the drafting of every step. A probe also catches the drafter up on the plain
steps before it, so its time is dearer than a step drafting every step: such times stand for a
K only until a steady one exists, and a probe that hits but loses is followed by one more drafted
token, timed steadily, before the back-off. A tree drafter chooses among its tree,
chains of 1..k_max (the tree's top-1 path, cheaper where the tree's side branches are seldom
taken) and a plain step the same way; chains join the choice once one has been timed (a probe,
or a try beside the tree), its probes draft a chain of one token, and every third try beside a
best chain is the tree (its own estimate would otherwise go stale). A probe that hits, or a try
of the tree that beats the best choice, brings the tree back for as long as its steps keep
beating it; where no chain pays either, the tree's try after the hit, not the hit, decides
whether the probes back off (a dear tree tried at every hit would otherwise restart the back-off
one probe in four, and the budget counts those tries).

K changes only what is proposed, never how it is verified: greedy output equals plain
decoding's and sampled output keeps the target's distribution at every step whatever K is
chosen (the choice depends on past steps only). A seed reproduces a sampled output only at
fixed K, as the choice follows measured times.

Anchors: transformers' assisted generation (dynamic number of assistant tokens, the assistant
confidence threshold), vLLM's dynamic speculation work (Liu et al. 2024, "Optimizing
Speculative Decoding for Serving Large Language Models Using Goodput") and EAGLE-2's
context-dependent draft trees (Li et al. 2024).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

TREE = -1  # choose(): draft the configured tree


@dataclass
class AdaptiveK:
    """Chooses each step's K in 0..k_max (a tree drafter: TREE too) and learns from each step.

    k_start: the K of the first step (the drafter's default); the next two steps are plain ones,
    so that both ends of the cost line are measured before the model chooses. The measurements
    outlive a generation: `new_generation()` starts the next one's history from what the last
    ones learned, so a draft found useless is not tried at length again on every prompt.
    """

    k_max: int
    k_start: int
    tree: bool = False
    decay: float = 0.95  # per drafted step: ~20 steps of memory
    prior_weight: float = 2.0  # pseudo-steps of the previous position's rate at a rarely reached one
    cost_samples: int = 5  # a K's cost: the median of its last few step times (a cold step is an outlier)
    probe_every: int = 8
    probe_max: int = 64  # the back-off's cap, raised where probes are dear (probe_budget)
    probe_budget: float = 0.01  # at the cap, probes cost at most this share of the decoding time
    explore_every: int = 16  # drafted steps between two tries of a neighbour of the best K
    min_gain: float = 0.05  # draft only where the expected rate beats plain decoding's by this share
    history: list[int] = field(default_factory=list)  # the K each step drafted (a tree: its node count)

    def __post_init__(self):
        if self.k_max < 1:
            raise ValueError("adaptive K needs k_max >= 1")
        self.k_start = max(1, min(self.k_start, self.k_max))
        self._reached = [0.0] * self.k_max
        self._accepted = [0.0] * self.k_max
        self._tree_tokens = None  # running mean of tokens per tree step
        self._cost: dict[int, float] = {}  # k (TREE for the tree) -> seconds per step
        self._times: dict[int, list[float]] = {}  # k -> its last `cost_samples` step times
        self._draft: dict[int, float] = {}  # k -> drafting's share of a step (lower median), where timed
        self._draft_times: dict[int, list[float]] = {}
        # A drafting step after several plain ones also catches the drafter up on them (an EAGLE
        # head's feature rows, a draft LM's cache): its time is not what drafting every step costs.
        # Such steps' timings count only for a K with no steady timing yet (see _observe_time).
        self._steady: set[int] = set()  # K with a timing from a step that did not catch up
        self._caught_up_times: dict[int, list[float]] = {}
        self._caught_up_draft_times: dict[int, list[float]] = {}
        self._steady_draft: set[int] = set()
        self._confirm = False  # a probe hit: the next step drafts one token again, timed steady
        self._confirming = False
        self._plain_run = 0  # plain steps since the last drafted one
        self._probe_gap = self.probe_every
        self._retry_tree = False
        self._probe_tree = False  # the tree's next try was brought by a probe's hit
        self._tree_try = False  # the step chosen now drafts the tree where the tree is not the best choice
        self._steps = 0  # steps chosen over every generation: the first two bootstrap the costs
        self._since_explore = 0  # drafted steps since a neighbour of the best K was last tried
        self._explore_up = False  # the first try goes down: from K = 1 that re-times the plain step
        self._explores = 0  # tries beside a best chain so far (a tree drafter's every third is its tree)

    def new_generation(self) -> None:
        """Start another generation's history; acceptance, costs and the probe back-off carry over."""
        self.history = []

    # --- the model -----------------------------------------------------------------------------

    def rates(self) -> list[float]:
        """α_j for j = 1..k_max: accepted / reached, shrunk toward α_{j-1} (0.5 before position 1)."""
        out, prior = [], 0.5
        for reached, accepted in zip(self._reached, self._accepted):
            prior = (accepted + self.prior_weight * prior) / (reached + self.prior_weight)
            out.append(prior)
        return out

    def expected_tokens(self, k: int, rates: list[float] | None = None) -> float:
        """E(k): tokens a step drafting k emits, the target's own token included (`rates`: the
        rates() of this moment, computed once by a caller that asks for every k)."""
        if k == TREE:
            return 1.0 if self._tree_tokens is None else self._tree_tokens
        total, run = 1.0, 1.0
        for a in (self.rates() if rates is None else rates)[:k]:
            run *= a
            total += run
        return total

    def cost(self, k: int) -> float | None:
        """Seconds per step drafting k: measured, or interpolated linearly between the nearest
        measured K on each side (extrapolated from the two highest); None before any measurement.
        Never below a plain step's cost plus the drafting measured for k: a step that drafts does
        a plain step's work and more, and a plain cost timed on a slow stretch would otherwise
        make a draft that is never right look free."""
        c = self._raw_cost(k)
        floor = self._draft.get(k)
        if c is not None and k not in (0, TREE) and floor is not None and 0 in self._cost:
            c = max(c, self._cost[0] + floor)
        return c

    def _raw_cost(self, k: int) -> float | None:
        if k in self._cost:
            return self._cost[k]
        known = sorted(x for x in self._cost if x != TREE)
        if not known:
            return None
        at = bisect.bisect_left(known, k)  # k itself is not among them
        below, above = known[:at], known[at:]
        if below and above:
            a, b = below[-1], above[0]
        elif len(known) >= 2:
            a, b = (known[-2], known[-1]) if not above else (known[0], known[1])
        else:
            return self._cost[known[0]]
        ca, cb = self._cost[a], self._cost[b]
        return max(ca + (cb - ca) * (k - a) / (b - a), 1e-9)

    def rate(self, k: int, rates: list[float] | None = None) -> float | None:
        """Expected tokens per second drafting k (None: its cost is unknown)."""
        c = self.cost(k)
        return None if c is None else self.expected_tokens(k, rates) / c

    # --- the loop's two calls ------------------------------------------------------------------

    def choose(self) -> int:
        """The K of the next step: 0 (plain), 1..k_max, or TREE."""
        step, self._steps = self._steps, self._steps + 1
        drafted = TREE if self.tree else self.k_start
        if step == 0:
            k = best = drafted
        elif step in (1, 2) or 0 not in self._cost:
            k = best = 0  # two plain steps: the first is often cold (kernels warming up), the lower median drops it
        else:
            alphas = self.rates()  # once a step: _best and _untried both read them
            k = best = self._best(alphas)
            if self._retry_tree:  # a probe hit, or a try of the tree beat the best choice: the tree again
                k, self._retry_tree = TREE, False
            elif k == 0 and self._confirm:
                k = 1  # after a probe that hit: one token again, this time without catching up
            elif (untried := self._untried(best, alphas)) is not None:
                k = untried
            elif k == 0 and self._plain_run >= self._probe_gap:
                k = 1  # a probe, one drafted token (a tree drafter too: a whole tree is a dear probe)
            elif k != 0 and self._since_explore >= self.explore_every:
                k = self._beside(k)
        self._tree_try = k == TREE and best != TREE
        self._confirming, self._confirm = self._confirm and k == 1, False
        self.history.append(k)
        return k

    def _untried(self, best: int, alphas: list[float]) -> int | None:
        """A chain never timed steadily whose best case beats the best choice by `min_gain`: its
        expected tokens over the least a step drafting it can cost (a plain step, plus its tokens
        at the cheapest drafted token measured so far). A verify's cost is not linear in its rows
        on a CPU (an AVX2 EPYC verified 4 tokens of Qwen2.5-Coder-1.5B at 1.29 plain steps and 3
        at 1.68: GEMM kernels tile the rows), so a K interpolated between two timed ones can look
        dear and never be chosen, nor timed. Each is tried until timed steadily (twice at most:
        a try after plain steps catches the draft up); a useless draft's E(k) stays near 1, so it
        tries none."""
        if self.tree and not self._chain_timed():
            return None
        untimed = [x for x in range(1, self.k_max + 1) if x not in self._steady]
        plain = self._cost.get(0)
        per_token = [self._draft[x] / x for x in self._draft if x not in (0, TREE)]
        if not untimed or not plain or not per_token:
            return None
        least = min(per_token)
        bar = (1 + self.min_gain) * (self.rate(best, alphas) or 0.0)
        best_case = {x: self.expected_tokens(x, alphas) / (plain + least * x) for x in untimed}
        x = max(best_case, key=best_case.__getitem__)
        return x if best_case[x] > bar else None

    def _beside(self, k: int) -> int:
        """A try beside the best K: one fewer or one more token, alternately (fewer first); a tree
        drafter's every third try from a chain is its tree, and from the tree its best chain (one
        token while no chain was timed: a long chain's cost would be a guess)."""
        self._since_explore = 0
        if k == TREE:
            if not self._chain_timed():
                return 1
            return max(range(1, self.k_max + 1), key=lambda x: self.rate(x) or 0.0)
        self._explores += 1
        if self.tree and self._explores % 3 == 0:
            return TREE
        up = self._explore_up and k < self.k_max
        self._explore_up = not up
        return k + 1 if up else k - 1  # from K = 1 down is a plain step: plain's cost is re-timed too

    def observe_cost(self, k: int, seconds: float, caught_up: bool = False) -> None:
        """A step that drafted k took `seconds` (drafting, verifying and the roll-back);
        `caught_up`: the drafter also caught up on several plain steps in it."""
        if seconds > 0:
            self._observe_time(self._cost, self._steady, self._times, self._caught_up_times, k, seconds, caught_up)

    def _observe_time(self, into, steady, times, caught_up_times, k, seconds, caught_up) -> None:
        """A K's time: the lower median of its steady timings; of the caught-up ones (dearer: the
        catching up is work a step that drafts after a drafted step does not do) only while no
        steady one exists, else a draft whose probes catch up on 64 plain steps looks too dear
        ever to be drafted, and is never timed drafting steadily."""
        if not caught_up:
            steady.add(k)
            into[k] = self._recent(times, k, seconds)
        elif k not in steady:
            into[k] = self._recent(caught_up_times, k, seconds)

    def _recent(self, samples: dict[int, list[float]], k: int, seconds: float) -> float:
        """Add a timing of k to `samples`; -> the lower median of its last `cost_samples`."""
        times = samples.setdefault(k, [])
        times.append(seconds)
        del times[: -self.cost_samples]
        return statistics.median_low(times)

    def observe(
        self, k: int, num_accepted: int, seconds: float | None = None, draft_seconds: float | None = None
    ) -> None:
        """The step that drafted k kept num_accepted drafts and took `seconds` (None: its time
        comes later through observe_cost, or never), `draft_seconds` of them drafting."""
        caught_up = k != 0 and self._plain_run > 1
        if seconds is not None:
            self.observe_cost(k, seconds, caught_up)
        if draft_seconds is not None and k not in (0, TREE) and draft_seconds > 0:
            self._observe_time(
                self._draft,
                self._steady_draft,
                self._draft_times,
                self._caught_up_draft_times,
                k,
                draft_seconds,
                caught_up,
            )
        if k == 0:
            self._plain_run += 1
            return
        if k == TREE and self._tree_try:
            # One try moves the tree's running mean only a little: while its tries beat the best
            # other choice, keep trying, so a tree that started to pay takes over within steps.
            others = [self.rate(x) or 0.0 for x in range(0, self.k_max + 1)]
            tried = (1 + num_accepted) / (seconds or self.cost(TREE) or math.inf)
            self._retry_tree = tried > max(others)
            if self._probe_tree:  # the try a probe's hit brought: it, not the hit, decides the back-off
                self._back_off(self._retry_tree)
        self._probe_tree = False
        probe = self._plain_run >= self._probe_gap
        self._since_explore += 1
        self._plain_run = 0
        self._update_rates(k, num_accepted)
        if probe:  # back off while probes do not make drafting pay; one that does resets the gap
            hit = num_accepted > 0
            pays = hit and self._best() != 0
            # A tree drafter's hit tries its tree next; that try, not the hit, then resets the gap
            # or backs off further: where the tree is dear (a 17-token verify at 3 plain steps on a
            # CPU without fast few-row products) a hit one probe in four would otherwise draft the
            # tree and restart the back-off every time, for a draft that never pays.
            self._retry_tree = self.tree and hit
            self._probe_tree = self._retry_tree and not pays
            # A hit whose rate still loses may lose only by its catching up: where one drafted token
            # was never timed steadily, the next step times it (a tree drafter's next step is its
            # tree, timed steadily anyway).
            self._confirm = not self.tree and hit and not pays and 1 not in self._steady
            if not self._probe_tree:
                self._back_off(pays)
        elif self._confirming and self._best() != 0:  # the steady timing made drafting pay
            self._probe_gap = self.probe_every

    def _back_off(self, pays: bool) -> None:
        """After a probe: drafting pays again (the gap restarts) or not (the gap doubles, up to the cap)."""
        self._probe_gap = self.probe_every if pays else min(2 * self._probe_gap, self._probe_cap())

    def _probe_cap(self) -> int:
        """The longest gap between failing probes: `probe_max` plain steps, or more where a probe
        (its drafting, catching the draft up on the plain steps since the last one, a longer
        verify; for a tree drafter, the try of the tree its hit brings, at the hit's measured rate)
        costs so much over a plain step that 1 in `probe_max` steps would exceed the budget."""
        probe, plain = self._recent_low(self._caught_up_times.get(1)) or self._cost.get(1), self._cost.get(0)
        if probe is None or not plain:
            return self.probe_max
        extra = probe - plain
        if self.tree and TREE in self._cost:  # a hit (at the first position's rate) tries the tree too
            extra += self.rates()[0] * max(0.0, self._cost[TREE] - plain * self.expected_tokens(TREE))
        return max(self.probe_max, min(16 * self.probe_max, math.ceil(extra / (self.probe_budget * plain))))

    @staticmethod
    def _recent_low(times: list[float] | None) -> float | None:
        return statistics.median_low(times) if times else None

    def _best(self, alphas: list[float] | None = None) -> int:
        """The K with the highest expected rate from what is known now; 0 (plain decoding) unless
        that rate beats plain's by `min_gain`: rates estimated from a few steps carry more error
        than a marginal gain, and a draft that only breaks even costs its mistakes."""
        options = list(range(1, self.k_max + 1))
        if self.tree:  # chains join a tree drafter's choice once one was timed (else their cost is a guess)
            options = [TREE] + (options if self._chain_timed() else [])
        # The rates once, not once per K: this runs at every step, plain ones included, and a plain
        # step inside the speculative engine must cost what plain decoding's step costs.
        alphas = self.rates() if alphas is None else alphas
        rate = {x: self.rate(x, alphas) or 0.0 for x in options}
        best = max(options, key=rate.__getitem__)
        plain = self.rate(0, alphas)
        if plain is not None and rate[best] < (1 + self.min_gain) * plain:
            return 0
        return best

    def _chain_timed(self) -> bool:
        return any(x > 0 for x in self._cost)

    def _update_rates(self, k: int, num_accepted: int) -> None:
        if k == TREE:
            tokens = 1.0 + num_accepted
            old = self._tree_tokens
            self._tree_tokens = tokens if old is None else old + (1 - self.decay) * 4 * (tokens - old)
            return
        self._reached = [r * self.decay for r in self._reached]
        self._accepted = [a * self.decay for a in self._accepted]
        for i in range(min(num_accepted + 1, k)):
            self._reached[i] += 1.0
        for i in range(num_accepted):
            self._accepted[i] += 1.0

    def summary(self) -> dict:
        """What a report records: the K chosen at each step and how often each was chosen."""
        counts: dict[str, int] = {}
        for k in sorted(self.history, key=lambda k: k if k != TREE else 1 << 30):
            key = "tree" if k == TREE else str(k)
            counts[key] = counts.get(key, 0) + 1
        return {
            "k_max": self.k_max,
            "k_per_step": ["tree" if k == TREE else k for k in self.history],
            "k_counts": counts,
        }


class EventClock:
    """Step times on a CUDA stream without waiting for it: CUDA events are recorded around each
    step and read one step later, when the next step's own device-to-host read (the accepted
    tokens) has already passed them, so timing adds no synchronisation to the loop."""

    def __init__(self, event_factory=None):
        if event_factory is None:
            import torch

            event_factory = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self._event = event_factory
        self._start = None
        self._done: list[tuple[int, object, object]] = []

    def start(self) -> None:
        self._start = self._event()
        self._start.record()

    def stop(self, k: int) -> list[tuple[int, float]]:
        """End the step that drafted k; -> (k, seconds) of the earlier steps whose events are done."""
        end = self._event()
        end.record()
        ready, waiting = [], []
        for item in self._done:
            (ready if item[2].query() else waiting).append(item)
        self._done = [*waiting, (k, self._start, end)]
        return [(kk, a.elapsed_time(b) / 1e3) for kk, a, b in ready]


__all__ = ["TREE", "AdaptiveK", "EventClock"]
