"""One decoding loop for plain and speculative decoding (batch size 1, as Spec-Bench measures).

    prefill target on the prompt → sample t0 from the target
    repeat: drafter proposes a chain d_1..d_k or a tree of n nodes
            → ONE target forward over [pending, drafted...] (a tree with its attention mask and
              position ids) → verify (greedy / lossless sampling / opt-in lossy typical)
            → keep the accepted path + 1 target token → roll the cache back to the kept prefix
              (a chain crops, a tree's path is gathered down: KVCache.compact)
            → feed tokens to the stop rule in order

A chain is the one-branch tree: both go through the same verification functions. Plain decoding
is the same loop with no drafter (k = 0), so a comparison between the two shares every cost
except drafting and verifying. The target's cache always holds every emitted token but the
newest ("pending"), which the next forward consumes first.

Device-agnostic: the target decodes into a static cache everywhere; on CUDA its small
decode/verify forwards (fixed shapes) are torch.compile'd with CUDA graphs, on CPU the same code
runs eagerly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import operator
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from draftsmith.errors import DraftsmithError

from .adaptive import TREE, AdaptiveK, EventClock
from .context import ContextFit
from .metrics import SpecMetrics
from .proposal import Drafter, check_num_speculative_tokens, default_num_speculative_tokens, speculative_cap
from .sampling import GREEDY, SamplingConfig, logits_to_probs, sample
from .stopping import StopCriteria
from .tree import Tree, TreeConfig
from .verify import greedy_tree, tree_speculative_sampling, typical_acceptance

# "lossless": greedy verification at temperature 0, speculative sampling above (the output
# follows the target's distribution exactly). "typical-lossy": Medusa's typical acceptance,
# which changes the output distribution; its name says so and it is never a default.
VERIFICATIONS = ("lossless", "typical-lossy")
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


@functools.lru_cache(maxsize=64)
def _chain(k: int) -> Tree:
    return Tree.chain(k)


def _validated_engine_args(target, drafter, k, tree, verification, adaptive):
    """Engine's arguments checked at the boundary, each refused in one line naming the argument,
    the value and what is accepted (instead of a TypeError from deep in the loop); -> (k as an
    int or None, tree as a TreeConfig or None). A mapping for `tree` builds TreeConfig(**mapping)."""
    if target is None or not callable(getattr(target, "forward_hidden", None)):
        raise DraftsmithError(
            f"Engine: target must be a loaded target (Target.load(name)), got {type(target).__name__} {target!r:.60}"
        )
    if drafter is not None and not all(callable(getattr(drafter, m, None)) for m in ("start", "propose", "accept")):
        raise DraftsmithError(
            f"Engine: drafter must be a loaded drafter (load_drafter(spec, target)) or None, "
            f"got {type(drafter).__name__} {drafter!r:.60}"
        )
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise DraftsmithError(
                f"Engine: num_speculative_tokens must be an int >= 1 (or None: the drafter's default), "
                f"got {type(k).__name__} {k!r}"
            )
        k = int(k)
        if drafter is not None and k < 1:
            raise DraftsmithError(f"Engine: num_speculative_tokens must be >= 1 with a drafter, got {k}")
    if isinstance(tree, Mapping):
        try:
            tree = TreeConfig(**tree)
        except TypeError:
            fields = ", ".join(f.name for f in dataclasses.fields(TreeConfig))
            raise DraftsmithError(
                f"Engine: tree {dict(tree)!r} is not a TreeConfig: its keys must be among {fields}"
            ) from None
    elif tree is not None and not isinstance(tree, TreeConfig):
        raise DraftsmithError(
            f"Engine: tree must be a TreeConfig (or a mapping of its fields) or None, "
            f"got {type(tree).__name__} {tree!r}"
        )
    if not isinstance(verification, str):
        raise DraftsmithError(
            f"Engine: verification must be one of {', '.join(VERIFICATIONS)}, got {type(verification).__name__} "
            f"{verification!r}"
        )
    if not isinstance(adaptive, bool):
        raise DraftsmithError(f"Engine: adaptive must be True or False, got {type(adaptive).__name__} {adaptive!r}")
    return k, tree


def _checked_seed(sampling, seed) -> int | None:
    """generate's sampling and seed, refused in one line before any work; -> the seed as an int
    (a numpy integer too), or None."""
    if not isinstance(sampling, SamplingConfig):
        hint = "SamplingConfig(**...)" if isinstance(sampling, Mapping) else "SamplingConfig(temperature=...)"
        raise DraftsmithError(
            f"generate: sampling must be a SamplingConfig (e.g. {hint}), got {type(sampling).__name__} {sampling!r}"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64):
        raise DraftsmithError(
            f"generate: seed must be an int in 0..2**64-1 (or None), got {type(seed).__name__} {seed!r}"
        )
    return None if seed is None else int(seed)


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
        num_speculative_tokens, tree = _validated_engine_args(
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
        if num_speculative_tokens is None:  # the drafter's kind's default K, within its cap
            if drafter is None:
                num_speculative_tokens = 0
            else:
                num_speculative_tokens = adaptive_ceiling(drafter) if self.adaptive else self.k_start
        if drafter is not None and num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1 with a drafter")
        if verification not in VERIFICATIONS:
            hint = " (typical acceptance is lossy: ask for it as 'typical-lossy')" if "typical" in verification else ""
            raise DraftsmithError(
                f"unknown verification {verification!r}: choose one of {', '.join(VERIFICATIONS)}{hint}"
            )
        if drafter is not None and tree is None:  # a chain: the drafter must draft all K (a tree ignores K)
            what = f"this {getattr(drafter, 'kind', '')} drafter".replace("  ", " ")
            check_num_speculative_tokens(num_speculative_tokens, speculative_cap(drafter), what)
        if tree is not None and drafter is not None and not getattr(drafter, "supports_trees", False):
            raise DraftsmithError(
                f"a {getattr(drafter, 'kind', 'this')} drafter proposes chains only; trees need a medusa or eagle "
                "drafter"
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
            tuple(drafter.hidden_layers)
            if drafter is not None and getattr(drafter, "needs_hidden_states", False)
            else None
        )

    @property
    def max_draft_tokens(self) -> int:
        """Nodes one step may verify: k for a chain; for a tree the drafter's own bound when it
        has one (a Medusa tree's depth defaults to its number of heads), else the config's."""
        if self.tree is None:
            return self.k
        bound = getattr(self.drafter, "max_tree_nodes", None)
        return bound(self.tree) if bound is not None else self.tree.max_nodes

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
        """Decode one prompt. `speculative=False` runs plain decoding even if a drafter is set."""
        seed = _checked_seed(sampling, seed)
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
        k = self.k if drafter is not None else 0
        layers = self.hidden_layers if drafter is not None else None
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
        stop = StopCriteria(
            max_new_tokens,
            target.eos_token_ids if eos_token_ids is None else eos_token_ids,
            stop_strings,
            target.tokenizer,
        )
        generator = torch.Generator(device=device)
        generator.manual_seed(0 if seed is None else seed)
        max_length = self.cache_length(prompt.shape[1], max_new_tokens, drafter is not None)
        cache = target.new_cache(max_length)
        seq = torch.empty(1, max_length, dtype=torch.long, device=device)  # prompt + emitted ids
        seq[:, : prompt.shape[1]] = prompt
        n_seq = prompt.shape[1]
        metrics, tokens, from_draft, steps = SpecMetrics(), [], [], []
        forwards = 0
        # Where each step's time goes, measured inside this loop (not in isolation as
        # measure_step_costs does): drafting (propose + accept) and verifying (the target forward
        # + verification). On CUDA only with `time_steps`, which synchronises every step.
        timed = device.type != "cuda" or self.time_steps
        # CUDA, untimed: the adaptive policy's step costs come from CUDA events read a step late.
        clock = EventClock() if policy is not None and not timed else None
        t_draft, t_verify = [], []

        _sync(device)
        t_start = time.perf_counter()
        if drafter is not None and self.draft_first and prompt.shape[1] > 1:
            # The prompt's last token is the pending one: the first step drafts after it.
            _, hidden = target.forward_hidden(prompt[:, :-1], cache, logits_to_keep=1, hidden_layers=layers)
            drafter.start(prompt[:, :-1], max_length, hidden=hidden)
            new_ids, new_src = [], []
        else:
            logits, hidden = target.forward_hidden(prompt, cache, logits_to_keep=1, hidden_layers=layers)
            logits = logits[-1]
            pending = sample(logits_to_probs(logits, sampling), generator) if not sampling.greedy else logits.argmax(-1)
            if drafter is not None:
                drafter.start(prompt, max_length, hidden=hidden)
            new_ids, new_src = [int(pending)], [False]
            seq[0, n_seq] = pending
            n_seq += 1
        reason = None
        while True:
            for tok, src in zip(new_ids, new_src):  # the stop rule sees tokens one by one
                tokens.append(tok)
                from_draft.append(src)
                reason = stop.check(tokens)
                if reason:
                    break
            if reason:
                break
            if timed:
                _sync(device)
                t0 = time.perf_counter()
            elif clock is not None:
                clock.start()
            k_step = policy.choose() if policy is not None else k  # TREE: the configured tree
            if drafter is not None and k_step != 0:
                k_draft = k if k_step == TREE else k_step  # a tree drafter ignores K
                shape = self.tree if policy is None or k_step == TREE else None  # an adaptive probe: a chain
                proposal = drafter.propose(seq[:, :n_seq], k_draft, sampling, generator, tree=shape)
            else:  # plain decoding, or a plain step the adaptive policy chose
                proposal = None
            if timed:
                _sync(device)
                t1 = time.perf_counter()
            n = len(proposal) if proposal is not None else 0
            tree = (proposal.tree or _chain(n)) if n else _chain(0)
            drafted = proposal.tokens if n else seq[0, :0]
            step_input = torch.cat([seq[0, n_seq - 1 : n_seq], drafted]).unsqueeze(0)
            valid = cache.length  # everything before the pending token
            positions = mask = None
            if not tree.is_chain:
                positions = tree.position_ids(valid, device)
                mask = tree.attention_mask(valid, cache.kv_length(n + 1), target.dtype, device)
            logits, hidden = target.forward_hidden(step_input, cache, positions, mask, hidden_layers=layers)
            forwards += 1
            if typical:
                path, nxt = typical_acceptance(tree, drafted, logits, sampling.temperature, generator=generator)
            elif sampling.greedy:
                path, nxt = greedy_tree(tree, drafted, logits)
            else:
                q = proposal.probs if n else None
                path, nxt = tree_speculative_sampling(tree, drafted, q, logits_to_probs(logits, sampling), generator)
            n_acc = len(path)
            if timed:
                _sync(device)
                t2 = time.perf_counter()
            if tree.is_chain:  # pending + accepted drafts stay; rejected ones go
                cache.crop(valid + 1 + n_acc)
                kept = slice(0, n_acc + 1)  # rows of the root and the accepted nodes
                accepted = drafted[:n_acc]
            else:  # gather the root and the accepted path down to valid, valid+1, ...
                kept = torch.tensor([0] + path, device=device)
                cache.compact(valid, kept + valid)
                accepted = drafted[kept[1:] - 1]
            if drafter is not None:
                drafter.accept(n_acc, hidden=None if hidden is None else hidden[kept])
            if timed:
                _sync(device)
                t3 = time.perf_counter()
                t_draft.append(t1 - t0 + t3 - t2)  # the cache roll-back sits with accept: bookkeeping of a step
                t_verify.append(t2 - t1)
            if policy is not None:
                policy.observe(k_step, n_acc, t3 - t0 if timed else None, t1 - t0 if timed else None)
                for k_done, seconds in clock.stop(k_step) if clock is not None else ():
                    policy.observe_cost(k_done, seconds)
            metrics.update(n, n_acc, tree.depth if n else None)
            if n:
                steps.append((valid + 1, n_acc))
            seq[0, n_seq : n_seq + n_acc] = accepted
            seq[0, n_seq + n_acc] = nxt
            n_seq += n_acc + 1
            new_ids = accepted.tolist() + [int(nxt)]
            new_src = [True] * n_acc + [False]
        _sync(device)
        elapsed = time.perf_counter() - t_start
        extra = {"step_times_s": {"draft": t_draft, "verify": t_verify}} if timed else {}
        if policy is not None:
            extra["adaptive_k"] = policy.summary()
        return GenerationResult(
            tokens, from_draft, reason, metrics, elapsed, forwards, prompt.shape[1], extra=extra, steps=steps
        )

    @torch.inference_mode()
    def measure_step_costs(
        self, prompt_ids, repeats: int = 7, per_position_acceptance=None, max_new_tokens: int = 0
    ) -> dict:
        """Median seconds of: one plain target step (t_step), one verify of the drafted tokens
        (t_verify: k+1, or the tree's n+1 with its mask) and one drafting step in steady state
        for every number n of drafts the previous step kept (t_draft_by_accepted[n]: accept(n),
        then propose() after the n tokens and the target's own; the drafter's prefill excluded).

        Measured as the loop runs them: caches sized as generate(prompt, max_new_tokens) sizes
        them (a static cache's attention spans all its positions), step and verify timed in
        alternation (drift hits both alike). What a drafting step costs depends on n: a draft LM
        catches up on 1 token, or on 2 when every draft was kept; EAGLE and DFlash take n+1 rows
        of the target's features. Timing n = 0 only hid a shape-dependent slow path that made the
        loop's drafting 2x dearer (issue 17). t_draft_k is the mean over the acceptance
        histogram that `per_position_acceptance` (a run's, as SpecMetrics reports it) implies,
        uniform without it.

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
        base = cache.length

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

        def step(tree: Tree, layers=None):
            q = tree.num_nodes + 1
            ids = prompt[:, -1:].expand(1, q).contiguous()
            positions = None if tree.is_chain else tree.position_ids(base, device)
            mask = None if tree.is_chain else tree.attention_mask(base, cache.kv_length(q), target.dtype, device)

            def run():
                target.forward_hidden(ids, cache, positions, mask, hidden_layers=layers)
                cache.crop(base)

            return run

        if self.drafter is None:
            return {"t_step": timed(step(_chain(0)))[0]}
        d, n0 = self.drafter, prompt.shape[1]
        # Steady state, as inside the loop: start() and a first propose() take the prompt in (a
        # drafter may prefill lazily, at its first propose); each timed call is then one step
        # that kept n drafts: accept(n) with the n+1 rows of features the engine hands over,
        # then propose() on a sequence n+1 tokens longer.
        proposal = None
        by_accepted = []
        for n in range(self.max_draft_tokens + 1):
            longer = torch.cat([prompt, prompt[:, -1:].expand(1, (repeats + 1) * (n + 1))], 1)
            d.start(prompt[:, :-1], max(max_length, longer.shape[1] + self.max_draft_tokens + 2), hidden=hidden)
            proposal = d.propose(prompt, self.k, GREEDY, None, tree=self.tree)
            depth = proposal.tree.depth if proposal.tree is not None else len(proposal)
            if n > depth:  # a path cannot keep more drafts than the proposal is deep
                break
            rows = None if hidden is None else hidden[-1:].expand(n + 1, -1)
            grown = [n0]

            def draft(n=n, rows=rows, longer=longer, grown=grown):
                d.accept(n, hidden=rows)
                grown[0] += n + 1
                d.propose(longer[:, : grown[0]], self.k, GREEDY, None, tree=self.tree)

            by_accepted += timed(draft)
        t_step, t_verify = timed(step(_chain(0)), step(proposal.tree or _chain(len(proposal)), self.hidden_layers))
        return {
            "t_step": t_step,
            "t_verify": t_verify,
            "t_draft_by_accepted": by_accepted,
            "t_draft_k": expected_draft_cost(by_accepted, per_position_acceptance),
        }


def adaptive_ceiling(drafter) -> int:
    """The most tokens an adaptive engine drafts per step when none is given: the drafter's cap,
    else twice its default K (a strong draft's best K often lies above the default)."""
    cap = speculative_cap(drafter)
    return cap if cap is not None else 2 * default_num_speculative_tokens(drafter)


def prompt_tensor(prompt_ids, vocab_size: int | None, device) -> torch.Tensor:
    """A prompt as the [1, n] LongTensor the loop decodes, or one line naming what is wrong with
    it: text instead of ids, a wrong shape or dtype, an id outside the target's vocabulary."""
    usage = "a list of ints or a 1-D/1xN LongTensor; encode text with the target's tokenizer"
    if isinstance(prompt_ids, (str, bytes)):
        raise DraftsmithError(f"generate takes token ids ({usage}), not text")
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise DraftsmithError(f"generate takes token ids ({usage}), got a {prompt_ids.dtype} tensor")
        if prompt_ids.dim() > 2 or (prompt_ids.dim() == 2 and prompt_ids.shape[0] != 1):
            raise DraftsmithError(
                f"generate takes one prompt ({usage}), got a tensor of shape {list(prompt_ids.shape)}"
            )
        ids = prompt_ids.reshape(-1).tolist()
    else:
        try:
            ids = list(prompt_ids)
        except TypeError:
            raise DraftsmithError(f"generate takes token ids ({usage}), got {type(prompt_ids).__name__}") from None
        bad = [i for i in ids if isinstance(i, bool) or not hasattr(type(i), "__index__")]  # ints, numpy ints
        if bad:
            raise DraftsmithError(f"generate takes token ids ({usage}), got an element {bad[0]!r}")
        ids = [operator.index(i) for i in ids]
    if vocab_size:
        i = next((i for i, t in enumerate(ids) if not 0 <= t < vocab_size), None)
        if i is not None:
            raise DraftsmithError(
                f"prompt token id {ids[i]} (position {i}) is outside the target's vocabulary "
                f"of {vocab_size:,} ids (0..{vocab_size - 1})"
            )
    return torch.tensor(ids, dtype=torch.long, device=device).reshape(1, -1)


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
