"""One decoding loop for plain and speculative decoding (batch size 1, as Spec-Bench measures).

    prefill target on the prompt → sample t0 from the target
    repeat: drafter proposes d_1..d_k → ONE target forward over [pending, d_1..d_k]
            → verify (greedy chain / speculative sampling) → keep n drafted + 1 target token
            → roll both caches back to the kept prefix → feed tokens to the stop rule in order

Plain decoding is the same loop with no drafter (k = 0), so a comparison between the two shares
every cost except drafting and verifying. The target's cache always holds every emitted token
but the newest ("pending"), which the next forward consumes first.

Device-agnostic: the target decodes into a static cache everywhere; on CUDA its small
decode/verify forwards (fixed shapes q = 1 and q = k+1) are torch.compile'd with CUDA graphs, on
CPU the same code runs eagerly.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from .metrics import SpecMetrics
from .proposal import Drafter
from .sampling import GREEDY, SamplingConfig, logits_to_probs, sample
from .stopping import StopCriteria
from .verify import greedy_chain, speculative_sampling


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

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Engine:
    """Decodes with `target`, optionally speculating with `drafter` (any object behind `Drafter`)."""

    def __init__(self, target, drafter: Drafter | None = None, num_speculative_tokens: int = 4):
        if drafter is not None and num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1 with a drafter")
        self.target = target
        self.drafter = drafter
        self.k = num_speculative_tokens if drafter is not None else 0

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
        target, device = self.target, self.target.device
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)
        if prompt.shape[1] == 0:
            raise ValueError("empty prompt: nothing to condition on")
        drafter = self.drafter if speculative else None
        k = self.k if drafter is not None else 0
        stop = StopCriteria(
            max_new_tokens,
            target.eos_token_ids if eos_token_ids is None else eos_token_ids,
            stop_strings,
            target.tokenizer,
        )
        generator = torch.Generator(device=device)
        generator.manual_seed(0 if seed is None else seed)
        # +k+1: a last verify may write k+1 positions past the final kept token.
        max_length = prompt.shape[1] + max_new_tokens + k + 1
        cache = target.new_cache(max_length)
        seq = torch.empty(1, max_length, dtype=torch.long, device=device)  # prompt + emitted ids
        seq[:, : prompt.shape[1]] = prompt
        n_seq = prompt.shape[1]
        metrics, tokens, from_draft = SpecMetrics(), [], []
        forwards = 0

        _sync(device)
        t_start = time.perf_counter()
        logits = target.forward(prompt, cache, logits_to_keep=1)[-1]
        pending = sample(logits_to_probs(logits, sampling), generator) if not sampling.greedy else logits.argmax(-1)
        if drafter is not None:
            drafter.start(prompt, max_length)
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
            proposal = drafter.propose(seq[:, :n_seq], k, sampling, generator) if drafter else None
            kk = len(proposal) if proposal is not None else 0
            step_input = seq[:, n_seq - 1 : n_seq] if kk == 0 else torch.cat([seq[:, n_seq - 1], proposal.tokens]).unsqueeze(0)
            drafted = step_input[0, 1:]
            valid = cache.length  # everything before the pending token
            logits = target.forward(step_input, cache)
            forwards += 1
            if sampling.greedy:
                n_acc, nxt = greedy_chain(drafted, logits)
            else:
                q = proposal.probs if kk else None
                n_acc, nxt = speculative_sampling(drafted, q, logits_to_probs(logits, sampling), generator)
            cache.crop(valid + 1 + n_acc)  # pending + accepted drafts stay; rejected ones go
            if drafter is not None:
                drafter.accept(n_acc)
            metrics.update(kk, n_acc)
            accepted = drafted[:n_acc]
            seq[0, n_seq : n_seq + n_acc] = accepted
            seq[0, n_seq + n_acc] = nxt
            n_seq += n_acc + 1
            new_ids = accepted.tolist() + [int(nxt)]
            new_src = [True] * n_acc + [False]
        _sync(device)
        elapsed = time.perf_counter() - t_start
        return GenerationResult(tokens, from_draft, reason, metrics, elapsed, forwards, prompt.shape[1])

    @torch.inference_mode()
    def measure_step_costs(self, prompt_ids, repeats: int = 7) -> dict:
        """Median seconds of: one plain target step, one verify of k+1 tokens, one k-token draft.

        Inputs to predicted_speedup = τ·t_step / (t_draft_k + t_verify) (t_draft_k = k draft
        steps, as one `propose` call); measured at the prompt's context length.
        """
        target, device = self.target, self.target.device
        prompt = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)
        max_length = prompt.shape[1] + self.k + 2
        cache = target.new_cache(max_length)
        target.forward(prompt[:, :-1], cache, logits_to_keep=1)
        base = cache.length

        def timed(fn) -> float:
            times = []
            for _ in range(repeats + 1):  # first call is a warm-up
                _sync(device)
                t = time.perf_counter()
                fn()
                _sync(device)
                times.append(time.perf_counter() - t)
            return statistics.median(times[1:])

        def step(q: int):
            def run():
                target.forward(prompt[:, -1:].expand(1, q).contiguous(), cache)
                cache.crop(base)

            return run

        costs = {"t_step": timed(step(1))}
        if self.drafter is not None:
            costs["t_verify"] = timed(step(self.k + 1))

            def draft():
                self.drafter.start(prompt[:, :-1], max_length)
                self.drafter.propose(prompt, self.k, GREEDY, None)

            # start() prefills the drafter; subtract it so t_draft_k is the k drafting steps only.
            def draft_start():
                self.drafter.start(prompt[:, :-1], max_length)

            costs["t_draft_k"] = max(timed(draft) - timed(draft_start), 0.0)
        return costs


def predicted_speedup(tau: float, t_step: float, t_draft_k: float, t_verify: float) -> float:
    """Speedup the measured per-step costs predict: τ·t_step / (k·t_draft + t_verify).

    (Leviathan et al. 2023, Thm 3.8, with measured rather than modelled costs.) Comparing it to
    the measured speedup shows the engine's own per-step overhead.
    """
    return tau * t_step / (t_draft_k + t_verify)


__all__ = ["Engine", "GenerationResult", "predicted_speedup"]
