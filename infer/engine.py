"""One decoding loop for plain and speculative decoding (batch size 1, as Spec-Bench measures).

    prefill target on the prompt → sample t0 from the target
    repeat: drafter proposes a chain d_1..d_k or a tree of n nodes
            → ONE target forward over [pending, drafted...] (a tree with its attention mask and
              position ids) → verify (greedy / lossless sampling / opt-in lossy typical)
            → keep the accepted path + 1 target token → roll the cache back to the kept prefix
              (a chain crops, a tree's path is gathered down: KVCache.compact)
            → feed tokens to the stop rule in order

Each step is a call of infer/step.py's named step functions (propose, verify, commit), which
`measure_step_costs` times too; the adaptive policy (infer/adaptive.py) chooses each step's K.
A chain is the one-branch tree: both go through the same verification functions. Plain decoding
is the same loop with no drafter (k = 0), so a comparison between the two shares every cost
except drafting and verifying. The target's cache always holds every emitted token but the
newest ("pending"), which the next forward consumes first.

Device-agnostic: the target decodes into a static cache everywhere; on CUDA its small
decode/verify forwards (fixed shapes) are torch.compile'd with CUDA graphs, on CPU the same code
runs eagerly.
"""

from __future__ import annotations

import math
import numbers
import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from draftsmith.errors import DraftsmithError

from .adaptive import TREE, AdaptiveK, EventClock
from .context import ContextFit
from .inputs import VERIFICATIONS, checked_seed, prompt_tensor, validated_engine_args
from .metrics import SpecMetrics
from .proposal import (
    Drafter,
    Proposal,
    adaptive_ceiling,
    default_num_speculative_tokens,
    resolve_num_speculative_tokens,
)
from .sampling import GREEDY, SamplingConfig, logits_to_probs, sample
from .step import Decoding
from .stopping import StopCriteria
from .tree import TreeConfig

CACHE_BUCKET = 256  # compiled targets: static cache sizes are multiples of this


@dataclass
class GenerationResult:
    tokens: list[int]  # generated ids (prompt excluded), ending with the token that stopped it
    from_draft: list[bool]  # per token: True if it was a drafted token the target accepted
    stop_reason: str  # eos | stop_string | max_new_tokens
    metrics: SpecMetrics
    elapsed_s: float  # wall time including prefill, device synchronised
    target_forwards: int  # after prefill: one per step
    prompt_tokens: int = 0
    extra: dict = field(default_factory=dict)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (context length at verify, accepted) per drafted step

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Engine:
    """Decodes with `target`, optionally speculating with `drafter` (any object behind `Drafter`).

    tree: a TreeConfig for drafters that draft trees (`supports_trees`), or a mapping of its
    fields (`{"topk": 2, "depth": 3}` is TreeConfig(topk=2, depth=3)); None drafts chains of
    `num_speculative_tokens` (None: the drafter's default, its kind's `default_k` within its cap).
    verification: one of VERIFICATIONS.
    adaptive: choose each step's K in 0..num_speculative_tokens from the acceptance and step
    costs measured so far (infer/adaptive.py; 0 is a plain step), over this engine's
    generations: what one prompt taught carries to the next, so only an engine's first
    generation pays for finding out; with num_speculative_tokens None the ceiling is
    `adaptive_ceiling(drafter)`. A tree drafter chooses among its tree, chains and a plain step.
    Lossless verification only.
    """

    def __init__(
        self,
        target,
        drafter: Drafter | None = None,
        num_speculative_tokens: int | None = None,
        tree: TreeConfig | None = None,
        verification: str = "lossless",
        draft_first: bool = False,
        adaptive: bool = False,
    ):
        if isinstance(drafter, (str, bytes, os.PathLike)):  # a name where the loaded drafter goes
            raise DraftsmithError(
                f"Engine: the drafter must be a loaded drafter (load_drafter({os.fspath(drafter)!r}, target)), "
                f"not its name {drafter!r}"
            )
        num_speculative_tokens, tree = validated_engine_args(
            target, drafter, num_speculative_tokens, tree, verification, adaptive
        )
        if adaptive and drafter is not None and verification != "lossless":
            raise DraftsmithError(
                f"adaptive K needs lossless verification, not {verification!r}: pass a fixed -k with it"
            )
        self.adaptive = adaptive and drafter is not None
        self._policy: AdaptiveK | None = None  # built at the first speculative generate, kept
        self._policy_shape: tuple | None = None  # (K, k_start, tree?) it was built for
        # The K the first adaptive step drafts: the drafter's default.
        self.k_start = default_num_speculative_tokens(drafter) if drafter is not None else 0
        if verification not in VERIFICATIONS:
            hint = " (typical acceptance is lossy: ask for it as 'typical-lossy')" if "typical" in verification else ""
            raise DraftsmithError(
                f"unknown verification {verification!r}: choose one of {', '.join(VERIFICATIONS)}{hint}"
            )
        if tree is not None and drafter is not None and not drafter.supports_trees:
            raise DraftsmithError(
                f"a {drafter.kind or 'this'} drafter proposes chains only; trees need a medusa or eagle drafter"
            )
        # The drafter's kind's default K (an adaptive engine's: its ceiling), within its cap; a
        # chain must draft all K (a tree ignores K).
        if drafter is not None:
            num_speculative_tokens = resolve_num_speculative_tokens(
                drafter, num_speculative_tokens, adaptive=self.adaptive, chain=tree is None
            )
        self.target = target
        self.drafter = drafter
        self.k = num_speculative_tokens if drafter is not None else 0
        self.tree = tree if drafter is not None else None
        self.verification = verification
        # draft_first: prefill all but the prompt's last token and draft the first new token too,
        # as llama.cpp's speculative examples do (vLLM, like our default, samples it from the
        # prefill). Same output; the steps, and so the acceptance counts, differ by that one step.
        self.draft_first = draft_first and drafter is not None
        self.time_steps = False  # CUDA: time every step inside the loop too (synchronises each step)
        self.hidden_layers = (
            tuple(drafter.hidden_layers) if drafter is not None and drafter.needs_hidden_states else None
        )

    @property
    def max_draft_tokens(self) -> int:
        """Nodes one step may verify: k for a chain; for a tree the drafter's own bound when it
        has one (a Medusa tree's depth defaults to its number of heads), else the config's."""
        return self.k if self.tree is None else self.drafter.max_tree_nodes(self.tree)

    def cache_length(self, prompt_tokens: int, max_new_tokens: int, drafting: bool = True) -> int:
        """Positions the caches of one request hold: +n+1, as a last verify may write n+1
        positions past the final kept token; compiled targets round up to CACHE_BUCKET (CUDA
        graphs are captured per cache size, so requests share them)."""
        length = prompt_tokens + max_new_tokens + (self.max_draft_tokens if drafting else 0) + 1
        if getattr(self.target, "compiled", False):
            length = -(-length // CACHE_BUCKET) * CACHE_BUCKET
        return length

    def _check_positions(self, prompt_tokens: int, max_new_tokens: int, drafting: bool) -> None:
        """Prompt + max_new_tokens + one step's drafts must fit the target's positions (past
        them a model's numbers mean nothing); the CLI's own check, in its words."""
        cfg = getattr(self.target, "config", None)
        positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        if not isinstance(positions, int):
            return
        draft_tokens = self.max_draft_tokens if drafting else 0
        name = getattr(self.target, "name", "the target")
        fit = ContextFit(positions, max_new_tokens, draft_tokens, model=name, truncate_flag=None)
        fit.keep(prompt_tokens, "given")

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids,
        max_new_tokens: int = 128,
        sampling: SamplingConfig = GREEDY,
        *,
        seed: int | None = 0,
        stop_strings=(),
        eos_token_ids=None,
        speculative: bool = True,
    ) -> GenerationResult:
        """Decode one prompt. `speculative=False` runs plain decoding even if a drafter is set.

        Each step: choose K (fixed, or the adaptive policy's; 0 is a plain step), then the step
        functions of infer/step.py: propose, verify, commit; then observe its times and acceptance."""
        run, stop, policy = self._request(
            prompt_ids, max_new_tokens, sampling, seed, stop_strings, eos_token_ids, speculative
        )
        clock, out = _StepClock(self.target.device, self.time_steps, policy), _Record(run)
        new_ids, num_accepted = self._prefill(run), 0
        while not out.emit(new_ids, num_accepted, stop):
            clock.start()
            k_step = policy.choose() if policy is not None else self.k  # TREE: the configured tree
            proposal = run.propose(*self._step_shape(k_step, policy is not None))
            clock.mark()
            verdict = run.verify(proposal)
            clock.mark()
            new_ids, num_accepted = run.commit(verdict), verdict.num_accepted
            clock.stop(k_step, num_accepted)
            out.step(verdict)
        return out.result(clock, policy)

    def _step_shape(self, k_step: int, adaptive: bool) -> tuple[int, TreeConfig | None]:
        """What a step that chose `k_step` drafts: (K, tree). TREE: the configured tree (a tree
        drafter ignores K); an adaptive engine's other choices are chains (a probe, a try)."""
        if k_step == TREE:
            return self.k, self.tree
        return k_step, None if adaptive else self.tree

    def _request(self, prompt_ids, max_new_tokens, sampling, seed, stop_strings, eos_token_ids, speculative):
        """One request's arguments checked and its state built -> (Decoding, StopCriteria, the
        adaptive policy or None)."""
        seed = checked_seed(sampling, seed)
        target, device = self.target, self.target.device
        prompt = prompt_tensor(prompt_ids, getattr(target, "vocab_size", None), device)
        if prompt.shape[1] == 0:
            raise ValueError("empty prompt: nothing to condition on")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise DraftsmithError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if self.verification == "typical-lossy" and self.drafter is None:
            raise DraftsmithError("typical-lossy verification needs a draft: it accepts drafted tokens (pass --draft)")
        drafter = self.drafter if speculative else None
        self._check_positions(prompt.shape[1], max_new_tokens, drafter is not None)
        policy = None
        if drafter is not None and self.adaptive:
            shape = (self.k, self.k_start, self.tree is not None)  # K or the tree may be set anew
            if self._policy is None or self._policy_shape != shape:
                self._policy, self._policy_shape = AdaptiveK(*shape), shape
            policy = self._policy
            policy.new_generation()
        typical = self.verification == "typical-lossy" and drafter is not None
        if typical and sampling.greedy:
            raise DraftsmithError("typical-lossy verification needs --temperature > 0 (at 0 it is greedy verification)")
        eos = target.eos_token_ids if eos_token_ids is None else eos_token_ids
        stop = StopCriteria(max_new_tokens, eos, stop_strings, target.tokenizer)
        generator = torch.Generator(device=device)
        generator.manual_seed(0 if seed is None else seed)
        max_length = self.cache_length(prompt.shape[1], max_new_tokens, drafter is not None)
        cache = target.new_cache(max_length)
        seq = torch.empty(1, max_length, dtype=torch.long, device=device)  # prompt + emitted ids
        seq[:, : prompt.shape[1]] = prompt
        layers = self.hidden_layers if drafter is not None else None
        run = Decoding(target, drafter, cache, seq, prompt.shape[1], sampling, generator, layers, typical)
        return run, stop, policy

    def _prefill(self, run: Decoding) -> list[int]:
        """The target takes the prompt in and the drafter starts on it -> the first token (none
        with draft_first: the prompt's last token is then the pending one, and the first step
        drafts after it)."""
        target, drafter, prompt = run.target, run.drafter, run.seq[:, : run.n_seq]
        max_length = run.seq.shape[1]
        if drafter is not None and self.draft_first and prompt.shape[1] > 1:
            _, hidden = target.forward_hidden(prompt[:, :-1], run.cache, logits_to_keep=1, hidden_layers=run.layers)
            drafter.start(prompt[:, :-1], max_length, hidden=hidden)
            return []
        logits, hidden = target.forward_hidden(prompt, run.cache, logits_to_keep=1, hidden_layers=run.layers)
        logits = logits[-1]
        if run.sampling.greedy:
            pending = logits.argmax(-1)
        else:
            pending = sample(logits_to_probs(logits, run.sampling), run.generator)
        if drafter is not None:
            drafter.start(prompt, max_length, hidden=hidden)
        run.seq[0, run.n_seq] = pending
        run.n_seq += 1
        return [int(pending)]

    @torch.inference_mode()
    def measure_step_costs(
        self, prompt_ids, repeats: int = 7, per_position_acceptance=None, max_new_tokens: int = 0
    ) -> dict:
        """Median seconds of: one plain step (t_step), one verify of the drafted tokens
        (t_verify: k+1, or the tree's n+1 with its mask) and one drafting step in steady state
        for every number n of drafts the previous step kept (t_draft_by_accepted[n]: accept(n),
        then propose() after the n tokens and the target's own; the drafter's prefill excluded).

        Measured with the loop's own step functions (infer/step.py: propose, verify), caches
        sized as generate(prompt, max_new_tokens) sizes them (a static cache's attention spans
        all its positions), step and verify timed in alternation (drift hits both alike). What a
        drafting step costs depends on n: a draft LM catches up on 1 token, or on 2 when every
        draft was kept; EAGLE and DFlash take n+1 rows of the target's features. Timing n = 0
        only hid a shape-dependent slow path that made the loop's drafting 2x dearer. t_draft_k
        is the mean over the acceptance histogram that `per_position_acceptance` (a run's, as
        SpecMetrics reports it) implies, uniform without it.

        Inputs to predicted_speedup = τ·t_step / (t_draft_k + t_verify); measured at the
        prompt's context length.
        """
        target, device = self.target, self.target.device
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)
        max_length = max(
            self.cache_length(prompt.shape[1], max_new_tokens), prompt.shape[1] + self.max_draft_tokens + 2
        )
        cache = target.new_cache(max_length)
        _, hidden = target.forward_hidden(prompt[:, :-1], cache, logits_to_keep=1, hidden_layers=self.hidden_layers)
        base, n0 = cache.length, prompt.shape[1]

        def timed(*fns) -> list[float]:
            """Median seconds of each fn, called in turn `repeats` times after a warm-up round."""
            times = [[] for _ in fns]
            for _ in range(repeats + 1):
                for fn, spent in zip(fns, times):
                    _sync(device)
                    t = time.perf_counter()
                    fn()
                    _sync(device)
                    spent.append(time.perf_counter() - t)
            return [statistics.median(spent[1:]) for spent in times]

        def verify(proposal: Proposal | None, layers):
            """The loop's verify step after the prompt (its last token pending), cache restored."""
            run = Decoding(target, None, cache, prompt, n0, GREEDY, None, layers)
            return lambda: (run.verify(proposal), cache.crop(base))

        plain = verify(None, None)
        if self.drafter is None:
            return {"t_step": timed(plain)[0]}
        d = self.drafter
        # Steady state, as inside the loop: start() and a first propose() take the prompt in (a
        # drafter may prefill lazily, at its first propose); each timed call is then one step
        # that kept n drafts: accept(n) with the n+1 rows of features the engine hands over,
        # then propose() on a sequence n+1 tokens longer.
        proposal = None
        by_accepted = []
        for n in range(self.max_draft_tokens + 1):
            longer = torch.cat([prompt, prompt[:, -1:].expand(1, (repeats + 1) * (n + 1))], 1)
            d.start(prompt[:, :-1], max(max_length, longer.shape[1] + self.max_draft_tokens + 2), hidden=hidden)
            run = Decoding(target, d, None, longer, n0, GREEDY, None, self.hidden_layers)
            proposal = run.propose(self.k, self.tree)
            depth = proposal.tree.depth if proposal.tree is not None else len(proposal)
            if n > depth:  # a path cannot keep more drafts than the proposal is deep
                break
            rows = None if hidden is None else hidden[-1:].expand(n + 1, -1)

            def draft(n=n, rows=rows, run=run):
                run.tell_drafter(n, rows)
                run.n_seq += n + 1
                run.propose(self.k, self.tree)

            by_accepted += timed(draft)
        # What the timed verify checks: the prompt's last token at every node of the proposal.
        repeated = Proposal(prompt[0, -1:].expand(len(proposal)).contiguous(), None, proposal.tree)
        t_step, t_verify = timed(plain, verify(repeated, self.hidden_layers))
        return {
            "t_step": t_step,
            "t_verify": t_verify,
            "t_draft_by_accepted": by_accepted,
            "t_draft_k": expected_draft_cost(by_accepted, per_position_acceptance),
        }


class _StepClock:
    """Where each step's time goes, measured inside the loop (not in isolation as
    measure_step_costs does): drafting (propose + commit: the cache roll-back sits with the
    drafter's accept, bookkeeping of a step) and verifying (the target forward + verification).
    On CUDA only with `time_steps`, which synchronises every step; untimed CUDA steps give the
    adaptive policy its costs through CUDA events read a step late (EventClock). The policy
    observes each step here."""

    def __init__(self, device: torch.device, time_steps: bool, policy: AdaptiveK | None):
        self.device, self.policy = device, policy
        self.timed = device.type != "cuda" or time_steps
        self.events = EventClock() if policy is not None and not self.timed else None
        self.draft, self.verify, self.marks = [], [], []

    def start(self) -> None:
        if self.timed:
            self.marks = []
            self.mark()
        elif self.events is not None:
            self.events.start()

    def mark(self) -> None:
        if self.timed:
            _sync(self.device)
            self.marks.append(time.perf_counter())

    def stop(self, k_step: int, num_accepted: int) -> None:
        seconds = draft_seconds = None
        if self.timed:
            self.mark()
            t0, t1, t2, t3 = self.marks
            self.draft.append(t1 - t0 + t3 - t2)
            self.verify.append(t2 - t1)
            seconds, draft_seconds = t3 - t0, t1 - t0
        if self.policy is not None:
            self.policy.observe(k_step, num_accepted, seconds, draft_seconds)
            for k_done, spent in self.events.stop(k_step) if self.events is not None else ():
                self.policy.observe_cost(k_done, spent)


class _Record:
    """What a generation emitted and measured: tokens in order (the stop rule sees them one by
    one), which were accepted drafts, acceptance metrics, (context length, accepted) per
    drafted step, and the wall time from the prefill on (device synchronised)."""

    def __init__(self, run: Decoding):
        self.prompt_tokens, self.device = run.n_seq, run.seq.device
        self.tokens, self.from_draft, self.steps = [], [], []
        self.metrics, self.forwards, self.reason = SpecMetrics(), 0, None
        _sync(self.device)
        self.t_start = time.perf_counter()

    def emit(self, ids: list[int], num_accepted: int, stop: StopCriteria) -> bool:
        """Feed a step's ids (its first `num_accepted` were accepted drafts) -> whether to stop."""
        for i, tok in enumerate(ids):
            self.tokens.append(tok)
            self.from_draft.append(i < num_accepted)
            self.reason = stop.check(self.tokens)
            if self.reason:
                return True
        return False

    def step(self, verdict) -> None:
        n = verdict.num_drafted
        self.forwards += 1
        self.metrics.update(n, verdict.num_accepted, verdict.tree.depth if n else None)
        if n:
            self.steps.append((verdict.valid + 1, verdict.num_accepted))

    def result(self, clock: _StepClock, policy: AdaptiveK | None) -> GenerationResult:
        _sync(self.device)
        elapsed = time.perf_counter() - self.t_start
        extra = {"step_times_s": {"draft": clock.draft, "verify": clock.verify}} if clock.timed else {}
        if policy is not None:
            extra["adaptive_k"] = policy.summary()
        return GenerationResult(
            self.tokens,
            self.from_draft,
            self.reason,
            self.metrics,
            elapsed,
            self.forwards,
            self.prompt_tokens,
            extra=extra,
            steps=self.steps,
        )


def expected_draft_cost(by_accepted: list[float], per_position_acceptance=None) -> float:
    """Σ_n P(the step before kept n drafts) · t_draft(n). P comes from per-position acceptance
    (a[i]: share of steps that kept position i): P(n) = a[n-1] - a[n], with a[-1] = 1 and a = 0
    past the end; uniform over n without it."""
    if not per_position_acceptance:
        return statistics.mean(by_accepted)
    a = [1.0] + [float(x) for x in per_position_acceptance] + [0.0] * len(by_accepted)
    p = [max(a[n] - a[n + 1], 0.0) for n in range(len(by_accepted))]
    p[-1] += max(1.0 - sum(p), 0.0)  # a deeper proposal than was timed: charge it the deepest cost
    return sum(w * t for w, t in zip(p, by_accepted)) / sum(p)


def predicted_speedup(tau: float, t_step: float, t_draft_k: float, t_verify: float) -> float:
    """Speedup the measured per-step costs predict: τ·t_step / (k·t_draft + t_verify).

    (Leviathan et al. 2023, Thm 3.8, with measured rather than modelled costs.) Comparing it to
    the measured speedup shows the engine's own per-step overhead.
    """
    for name, value, low in (("tau", tau, 1.0), ("t_step", t_step, 0.0), ("t_draft_k", t_draft_k, 0.0)):
        if not _finite_at_least(value, low):
            what = "the mean acceptance length, >= 1" if name == "tau" else "seconds, >= 0"
            raise DraftsmithError(f"predicted_speedup: {name} must be a finite number ({what}), got {value!r}")
    if not _finite_at_least(t_verify, 0.0) or t_verify == 0:
        raise DraftsmithError(f"predicted_speedup: t_verify must be a finite number of seconds > 0, got {t_verify!r}")
    return tau * t_step / (t_draft_k + t_verify)


def _finite_at_least(x, low: float) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x >= low


__all__ = ["Engine", "GenerationResult", "adaptive_ceiling", "expected_draft_cost", "predicted_speedup"]
