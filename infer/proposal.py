"""What a drafter hands the engine, and the interface every drafter implements.

Lives in infer/ (the lower layer) so that models/ can import it without infer/ importing models/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from draftsmith.errors import DraftsmithError

from .sampling import SamplingConfig
from .tree import Tree, TreeConfig

K_FLAG = "-k/--num-speculative-tokens"


@dataclass
class Proposal:
    """Drafted tokens: a chain, or the nodes of a tree.

    tokens: [n] long tensor on the target's device (n may be 0: nothing to propose this step).
            For a tree, tokens[i] is node i+1's token (the root, node 0, is the pending token).
    probs:  [n, V] the draft distribution each token was drawn from (after the same
            temperature/top-k/top-p as the target), or None for a deterministic proposal
            (prompt lookup, greedy drafting, top-k tree children), which verification treats
            as one-hot q. In a tree with sampled children, siblings carry the same row: the
            distribution they were drawn from without replacement.
    tree:   None for a chain; else the Tree whose nodes 1..n the tokens fill.
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    tree: Tree | None = None

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@runtime_checkable
class Drafter(Protocol):
    """The small interface the engine drives.

    start(prompt, max_length, hidden): reset per-request state (caches) for a new prompt [1, L].
    propose(seq, k, sampling, generator, tree): draft continuing `seq` ([1, n]: prompt plus every
        token emitted so far, the last of which the target has not consumed yet): a chain of up
        to k tokens, or a tree shaped by `tree` (only drafters with `supports_trees`).
    accept(num_accepted, hidden): told after verification how many drafted tokens were kept
        (for a tree: the accepted path's length), so the drafter can roll its own state back in
        step with the target's.

    Drafters that read the target's hidden states set `needs_hidden_states = True` and
    `hidden_layers` (indices into transformers' `hidden_states` tuple; -1 is the last layer
    after the final norm, the LM head's input). The engine then passes `hidden`, the chosen
    layers concatenated on the last dim: to start() one row per prompt token, to accept() one
    row for the root and each accepted token, in order (the last row produced the new pending
    token). Others get hidden=None.

    A drafter that cannot draft any number of tokens per step sets `max_speculative_tokens`, the
    most it drafts (Medusa: its heads; DFlash: its block minus the pending token; PARD: the K it
    was trained for); `check_num_speculative_tokens` refuses a K above it.

    A tree drafter may define `max_tree_nodes(tree_config) -> int`, the most nodes it drafts per
    step for that config; the engine sizes its caches by it (else by TreeConfig.max_nodes).
    """

    kind: str
    needs_hidden_states: bool

    def start(self, prompt: torch.Tensor, max_length: int, hidden: torch.Tensor | None = None) -> None: ...

    def propose(
        self,
        seq: torch.Tensor,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        tree: TreeConfig | None = None,
    ) -> Proposal: ...

    def accept(self, num_accepted: int, hidden: torch.Tensor | None = None) -> None: ...


def speculative_cap(drafter) -> int | None:
    """The most tokens `drafter` drafts per step (`max_speculative_tokens`), None: no limit."""
    cap = getattr(drafter, "max_speculative_tokens", None)
    return int(cap) if cap else None


def default_num_speculative_tokens(drafter) -> int:
    """The K drafted per step when none is given: the drafter's own default (a trained drafter's
    kind's `default_k` in draftsmith/kinds.py, within its cap), else the registry's default
    within `speculative_cap`."""
    k = getattr(drafter, "default_num_speculative_tokens", None)
    if k is None:
        from draftsmith.kinds import Kind

        cap = speculative_cap(drafter)
        k = Kind.default_k if cap is None else min(Kind.default_k, cap)
    return int(k)


def check_num_speculative_tokens(k: int, cap: int | None, what: str = "this drafter") -> int:
    """The one check of a requested K (every command and the engine call it): refused in one
    line, naming the flag and the cap, instead of drafting fewer tokens without a word. -> k"""
    if k < 1:
        raise DraftsmithError(f"{K_FLAG} must be >= 1, got {k}")
    if cap is not None and k > cap:
        raise DraftsmithError(
            f"{K_FLAG} {k}: {what} drafts at most {cap} tokens per step; pass -k {cap} or less (or leave it out)"
        )
    return k
