"""What a drafter hands the engine, and the interface every drafter implements.

Lives in infer/ (the lower layer) so that models/ can import it without infer/ importing models/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .sampling import SamplingConfig
from .tree import Tree, TreeConfig


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
