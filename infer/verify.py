"""Verification of drafted tokens: pure functions over tensors, named after their papers.

Chains (one target forward over [pending, d_1..d_k] gives k+1 rows of target logits): row i is
the target's distribution for the token after d_i (row 0: after the pending token). The chain
functions return `(num_accepted, next_token)`: the first `num_accepted` drafted tokens are kept
and `next_token` (the correction after a rejection, or the bonus token when all k pass) is the
target's own, so every step emits num_accepted + 1 tokens.

Trees (infer/tree.py): row i is the target's distribution after node i's path (row 0: after the
root, the pending token); node i's token is draft_tokens[i-1]. The tree functions return
`(path, next_token)` with `path` the accepted nodes from depth 1 down. A chain is the one-branch
tree: the tree functions hand it to the chain functions, so both decoders share one code path.
"""

from __future__ import annotations

import torch

from .tree import Tree


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


def greedy_tree(tree: Tree, draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """Greedy tree verification (Medusa, Cai et al. 2024; SpecInfer, Miao et al. 2024): from the
    root, step to the child whose token is the target's argmax, as long as one is; the longest
    accepted path is kept and the target's argmax after it is the next token."""
    if tree.is_chain:
        n, nxt = greedy_chain(draft_tokens, target_logits)
        return list(range(1, n + 1)), nxt
    target_tokens = target_logits.argmax(-1)
    best, toks = target_tokens.tolist(), draft_tokens.tolist()  # one device sync for the scan
    node, path = 0, []
    while True:
        nxt = next((c for c in tree.children[node] if toks[c - 1] == best[node]), None)
        if nxt is None:
            return path, target_tokens[node]
        path.append(nxt)
        node = nxt


def tree_speculative_sampling(
    tree: Tree,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    replacement: bool = False,
) -> tuple[list[int], torch.Tensor]:
    """Lossless tree verification: recursive rejection sampling over each node's children
    (SpecInfer's multi-step speculative sampling, Miao et al. 2024, Alg. 2; the without-replacement
    form of Jeon et al. 2024, "Recursive Speculative Decoding"; deterministic children as in
    Medusa / EAGLE-2 top-k trees).

    At a node with target distribution p, children x_1, x_2, ... are tried in order:
    - sampled children (draft_probs given; node i's row is the q its token was drawn from):
      accept x_j with probability min(1, p(x_j) / q(x_j)); on rejection p <- norm(max(0, p - q)),
      and without replacement (siblings drawn without replacement, `replacement=False`) also
      q(x_j) <- 0, q <- norm(q), the law the next sibling was actually drawn from;
    - deterministic children (draft_probs None: q is one-hot on x_j): accept with probability
      p(x_j) under the current residual p; on rejection p(x_j) <- 0, p <- norm(p).
    An accepted child becomes the node; when every child is rejected (or a leaf is reached) the
    next token is drawn from the current p. Each rejection step is a valid speculative-sampling
    step against the residual, so the emitted tokens follow the target's p exactly.

    Shapes: draft_tokens [n], draft_probs [n, V] or None, target_probs [n+1, V].
    """
    if tree.is_chain:
        n, nxt = speculative_sampling(draft_tokens, draft_probs, target_probs, generator)
        return list(range(1, n + 1)), nxt
    toks = draft_tokens.tolist()
    node, path = 0, []
    while True:
        p, q, chosen = target_probs[node], None, None
        for c in tree.children[node]:
            x = toks[c - 1]
            r = torch.rand((), generator=generator, device=p.device)
            if draft_probs is None:
                if bool(r < p[x]):
                    chosen = c
                    break
                p = _renormalised(p, x)
                continue
            if q is None:
                q = draft_probs[c - 1]
            if bool(r * q[x] < p[x]):  # r < p/q without dividing; q(x)=0 never accepts
                chosen = c
                break
            residual = (p - q).clamp_min(0)
            total = residual.sum()
            p = residual / total if total > 0 else p  # zero mass: a rounding artefact, keep p
            if not replacement:
                q = _renormalised(q, x)
        if chosen is None:
            return path, torch.multinomial(p, 1, generator=generator)[0]
        path.append(chosen)
        node = chosen


def _renormalised(dist: torch.Tensor, token: int) -> torch.Tensor:
    out = dist.clone()
    out[token] = 0
    total = out.sum()
    return out / total if total > 0 else dist


def typical_acceptance(
    tree: Tree,
    draft_tokens: torch.Tensor,
    target_logits: torch.Tensor,
    temperature: float,
    posterior_threshold: float = 0.09,
    posterior_alpha: float = 0.3,
    generator: torch.Generator | None = None,
) -> tuple[list[int], torch.Tensor]:
    """Medusa's typical acceptance (Cai et al. 2024, §2.3.1). LOSSY: the output no longer
    follows the target's distribution; the engine runs it only when asked for by name.

    A drafted token x is accepted when p(x) > min(ε, δ·exp(-H(p))) with p the target's
    distribution at temperature T, ε = posterior_threshold, δ = posterior_alpha; the longest
    accepted path is kept. The next token is sampled from p restricted to the same typical set.
    """
    if temperature <= 0:
        raise ValueError("typical acceptance needs temperature > 0 (at 0 it is greedy verification)")
    probs = torch.softmax(target_logits.float() / temperature, -1)
    entropy = -(probs * torch.log(probs.clamp_min(1e-10))).sum(-1)
    threshold = torch.minimum(torch.full_like(entropy, posterior_threshold), posterior_alpha * torch.exp(-entropy))
    n = draft_tokens.shape[0]
    node_rows = torch.tensor(tree.parents[1:], device=draft_tokens.device)
    ok = (probs[node_rows, draft_tokens] > threshold[node_rows]).tolist() if n else []
    best: list[int] = []
    stack = [(0, [])]
    while stack:  # deepest node whose whole path is typical; ties keep the first found in rank order
        node, path = stack.pop()
        if len(path) > len(best):
            best = path
        stack += [(c, path + [c]) for c in reversed(tree.children[node]) if ok[c - 1]]
    last = best[-1] if best else 0
    p = probs[last]
    typical = p > threshold[last]
    p = torch.where(typical, p, torch.zeros_like(p)) if bool(typical.any()) else p
    return best, torch.multinomial(p / p.sum(), 1, generator=generator)[0]
