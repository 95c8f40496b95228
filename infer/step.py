"""One decoding step as named functions over one request's state: `propose` (the drafter drafts a
chain or a tree, or nothing: a plain step), `verify` (ONE target forward over the pending token
and the drafts, then the verification rule), `commit` (roll the target's cache back to the kept
prefix, tell the drafter what was kept, append the tokens).

Engine.generate is a loop over these and Engine.measure_step_costs times the same functions, so
the speed model and the loop cannot drift apart: gpt-fast's `speculative_decode` (one function
per phase of a step) is the model. A plain step is the same three calls with no proposal: the
target's forward of one token, then a drafter's `accept(0, ...)`, which only queues what it has
to catch up on for its next propose (infer/proposal.py's `Drafter`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .proposal import Drafter, Proposal
from .sampling import SamplingConfig, logits_to_probs
from .tree import Tree, TreeConfig
from .verify import greedy_tree, tree_speculative_sampling, typical_acceptance


@functools.lru_cache(maxsize=64)
def chain(k: int) -> Tree:
    return Tree.chain(k)


@dataclass
class Verdict:
    """What one verify step decided: the tree verified (a chain of 0 for a plain step), its
    drafted tokens, the cache length before the step, the accepted node path, the target's own
    next token and the target's features of every row of the step (None: the drafter reads none)."""

    tree: Tree
    drafted: torch.Tensor
    valid: int
    path: list[int]
    nxt: torch.Tensor
    hidden: torch.Tensor | None

    @property
    def num_drafted(self) -> int:
        return int(self.drafted.shape[0])

    @property
    def num_accepted(self) -> int:
        return len(self.path)


class Decoding:
    """One request's decoding state: the target's cache, the sequence (prompt + emitted ids; the
    last one is pending: the cache holds every token before it), the drafter (None: plain
    decoding) and how to verify."""

    def __init__(
        self,
        target,
        drafter: Drafter | None,
        cache,
        seq: torch.Tensor,
        n_seq: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        layers: tuple[int, ...] | None,
        typical: bool = False,
    ):
        self.target, self.drafter, self.cache = target, drafter, cache
        self.seq, self.n_seq = seq, n_seq
        self.sampling, self.generator, self.layers, self.typical = sampling, generator, layers, typical

    def propose(self, k: int, tree: TreeConfig | None = None) -> Proposal | None:
        """The drafter's proposal after the sequence so far: a chain of k tokens, or `tree`'s
        nodes; None for a plain step (k = 0, or no drafter)."""
        if self.drafter is None or k == 0:
            return None
        return self.drafter.propose(self.seq[:, : self.n_seq], k, self.sampling, self.generator, tree=tree)

    def forward(self, drafted: torch.Tensor, tree: Tree) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's one forward over [pending, drafted...] (a tree with its attention mask
        and position ids) -> (logits, the drafter's features of those rows)."""
        cache, device = self.cache, self.seq.device
        step_input = torch.cat([self.seq[0, self.n_seq - 1 : self.n_seq], drafted]).unsqueeze(0)
        positions = mask = None
        if not tree.is_chain:
            positions = tree.position_ids(cache.length, device)
            mask = tree.attention_mask(cache.length, cache.kv_length(step_input.shape[1]), self.target.dtype, device)
        return self.target.forward_hidden(step_input, cache, positions, mask, hidden_layers=self.layers)

    def verify(self, proposal: Proposal | None) -> Verdict:
        """Verify the proposal in one target forward: greedy, lossless speculative sampling, or
        the opt-in lossy typical acceptance (infer/verify.py). A chain is the one-branch tree."""
        n = len(proposal) if proposal is not None else 0
        tree = (proposal.tree or chain(n)) if n else chain(0)
        drafted = proposal.tokens if n else self.seq[0, :0]
        valid = self.cache.length  # everything before the pending token
        logits, hidden = self.forward(drafted, tree)
        if self.typical:
            path, nxt = typical_acceptance(tree, drafted, logits, self.sampling.temperature, generator=self.generator)
        elif self.sampling.greedy:
            path, nxt = greedy_tree(tree, drafted, logits)
        else:
            q = proposal.probs if n else None
            p = logits_to_probs(logits, self.sampling)
            path, nxt = tree_speculative_sampling(tree, drafted, q, p, self.generator)
        return Verdict(tree, drafted, valid, path, nxt, hidden)

    def roll_back(self, verdict: Verdict):
        """The target's cache back to the kept prefix: a chain crops (the pending token and the
        accepted drafts stay), a tree's path is gathered down to valid, valid+1, ...
        -> (the kept rows of the step: root first, the accepted tokens)."""
        n_acc = verdict.num_accepted
        if verdict.tree.is_chain:
            self.cache.crop(verdict.valid + 1 + n_acc)
            return slice(0, n_acc + 1), verdict.drafted[:n_acc]
        kept = torch.tensor([0] + verdict.path, device=self.seq.device)
        self.cache.compact(verdict.valid, kept + verdict.valid)
        return kept, verdict.drafted[kept[1:] - 1]

    def commit(self, verdict: Verdict) -> list[int]:
        """Roll back, hand the drafter the kept rows' features, append the accepted tokens and the
        target's own. -> the ids emitted, in order."""
        kept, accepted = self.roll_back(verdict)
        hidden = verdict.hidden
        self.tell_drafter(verdict.num_accepted, None if hidden is None else hidden[kept])
        n_acc, at = verdict.num_accepted, self.n_seq
        self.seq[0, at : at + n_acc] = accepted
        self.seq[0, at + n_acc] = verdict.nxt
        self.n_seq += n_acc + 1
        return accepted.tolist() + [int(verdict.nxt)]

    def tell_drafter(self, num_accepted: int, rows: torch.Tensor | None) -> None:
        """The drafter learns how many drafts were kept, with the kept rows' features (after a
        plain step: 0 and the pending token's row, which it queues for its next propose)."""
        if self.drafter is not None:
            self.drafter.accept(num_accepted, hidden=rows)


__all__ = ["Decoding", "Verdict", "chain"]
