"""Verification of drafted tokens: pure functions over tensors, named after their papers.

Conventions (one target forward over [pending, d_1..d_k] gives k+1 rows of target logits):
row i is the target's distribution for the token after d_i (row 0: after the pending token).
Each function returns `(num_accepted, next_token)`: the first `num_accepted` drafted tokens are
kept and `next_token` (the correction after a rejection, or the bonus token when all k pass) is
the target's own, so every step emits num_accepted + 1 tokens.
"""

from __future__ import annotations

import torch


def greedy_chain(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Greedy verification: keep the longest prefix of the draft that equals the target's argmax.

    Output is token-for-token what greedy decoding of the target alone produces (up to ties in
    the target's own logits, which batched verification can break differently than 1-token
    decoding).
    """
    k = draft_tokens.shape[0]
    target_tokens = target_logits[: k + 1].argmax(-1)
    matches = (target_tokens[:k] == draft_tokens).int()
    num_accepted = int(matches.cumprod(0).sum().item()) if k else 0
    return num_accepted, target_tokens[num_accepted]


def speculative_sampling(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Lossless chain verification (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2).

    Draft token x_i ~ q_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the first
    rejection the replacement is drawn from the residual norm(max(0, p_i - q_i)); if all k pass,
    a bonus token is drawn from p_k. The emitted tokens are then distributed exactly as samples
    from p (the target's processed distribution).

    `draft_probs=None` means a deterministic proposal (q_i is one-hot on x_i, as for prompt
    lookup): accept with probability p_i(x_i); on rejection the residual is p_i with x_i zeroed.

    Shapes: draft_tokens [k], draft_probs [k, V] or None, target_probs [k+1, V].
    """
    k = draft_tokens.shape[0]
    if k:
        idx = torch.arange(k, device=draft_tokens.device)
        p_x = target_probs[idx, draft_tokens]
        q_x = draft_probs[idx, draft_tokens] if draft_probs is not None else torch.ones_like(p_x)
        r = torch.rand(k, generator=generator, device=p_x.device)
        # r < p/q written as r*q < p: no division, and q(x)=0 (impossible draft) never accepts.
        accepted = (r * q_x < p_x).int()
        num_accepted = int(accepted.cumprod(0).sum().item())
    else:
        num_accepted = 0
    p = target_probs[num_accepted]
    if num_accepted < k:
        if draft_probs is not None:
            residual = (p - draft_probs[num_accepted]).clamp_min(0)
        else:
            residual = p.clone()
            residual[draft_tokens[num_accepted]] = 0
        total = residual.sum()
        # A rejection has probability sum(max(0, q-p)) = sum(max(0, p-q)); if that mass is 0 in
        # float arithmetic the rejection was a rounding artefact and p itself is the right law.
        p = residual / total if total > 0 else p
    next_token = torch.multinomial(p, 1, generator=generator)[0]
    return num_accepted, next_token
