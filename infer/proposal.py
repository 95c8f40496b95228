"""What a drafter hands the engine, and the interface every drafter implements.

Lives in infer/ (the lower layer) so that models/ can import it without infer/ importing models/.
"""

from __future__ import annotations

from dataclasses import dataclass

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


class Drafter:
    """The runtime's contract with a drafter: every member the engine, the adaptive policy and
    the bench read, declared once with its default (as train/tasks/base.py's `TrainingTask` is
    for training). A drafter subclasses it and answers the three calls; callers read members
    directly, never probing a drafter for one.

    start(prompt, max_length, hidden): reset per-request state (caches) for a new prompt [1, L].
    propose(seq, k, sampling, generator, tree): draft continuing `seq` ([1, n]: prompt plus every
        token emitted so far, the last of which the target has not consumed yet): a chain of up
        to k tokens, or a tree shaped by `tree` (only drafters with `supports_trees`).
    accept(num_accepted, hidden): told after verification how many drafted tokens were kept
        (for a tree: the accepted path's length), so the drafter can roll its own state back in
        step with the target's. After a plain step (the adaptive policy's K = 0: no propose in
        between) it is called with 0 and must not run its model: whatever it has to catch up on
        (features, tokens) waits for its next propose(), which takes it in one batched forward.

    Drafters that read the target's hidden states set `needs_hidden_states = True` and
    `hidden_layers` (indices into transformers' `hidden_states` tuple; -1 is the last layer
    after the final norm, the LM head's input). The engine then passes `hidden`, the chosen
    layers concatenated on the last dim: to start() one row per prompt token, to accept() one
    row for the root and each accepted token, in order (the last row produced the new pending
    token). Others get hidden=None.
    """

    kind: str = ""  # the registry name (draftsmith/kinds.py)
    name: str = ""  # what it was loaded from: a --draft value or a checkpoint folder
    needs_hidden_states: bool = False
    hidden_layers: tuple[int, ...] = ()
    supports_trees: bool = False  # propose() takes a TreeConfig
    # The most tokens it drafts per step (Medusa: its heads; DFlash: its block minus the pending
    # token; PARD: the K it was trained for); None: any. `check_num_speculative_tokens` holds every
    # command to it.
    max_speculative_tokens: int | None = None
    # A draft vocabulary (FR-Spec): the target ids it proposes from; None: the whole vocabulary.
    draft_ids: torch.Tensor | None = None
    # Which forward its own model drafts with, for reports (models/fused.py's or transformers'); None: no such choice.
    forward_why: str | None = None

    @property
    def default_num_speculative_tokens(self) -> int:
        """The K drafted per step when none is given: its kind's `default_k` within its cap."""
        return kind_default_k(self.kind, speculative_cap(self))

    def max_tree_nodes(self, tree: TreeConfig) -> int:
        """The most nodes it drafts per step for `tree`: what the engine sizes its caches by."""
        return tree.max_nodes

    def as_assistant_model(self):
        """A transformers model for `generate(assistant_model=...)` baselines, or None."""
        return None

    def own_model(self) -> torch.nn.Module | None:
        """The model it drafts with: what the runtime casts to the draft's dtype (`--draft-dtype`)
        and times the CPU matmul kernels on; None: it drafts with no model (prompt lookup). A
        model made of the target's own tensors (`truncated:N`) is returned too: the caller tells."""
        return None

    def linear_modules(self) -> torch.nn.Module | None:
        """The modules holding every linear its drafting forward calls, for a CPU matmul kernel to
        route (infer/kernels.py `use_linear_kernel`); None: it has no model of its own."""
        return None

    def start(self, prompt: torch.Tensor, max_length: int, hidden: torch.Tensor | None = None) -> None:
        raise NotImplementedError(f"{type(self).__name__}.start")

    def propose(
        self,
        seq: torch.Tensor,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        tree: TreeConfig | None = None,
    ) -> Proposal:
        raise NotImplementedError(f"{type(self).__name__}.propose")

    def accept(self, num_accepted: int, hidden: torch.Tensor | None = None) -> None:
        raise NotImplementedError(f"{type(self).__name__}.accept")


class WrappedDrafter(Drafter):
    """A drafter that changes how another drafts (a test's forced acceptance, a recorder, argmax
    drafting): every member of the contract is the inner drafter's unless a subclass overrides it."""

    def __init__(self, inner: Drafter):
        self.inner = inner

    kind = property(lambda self: self.inner.kind)
    name = property(lambda self: self.inner.name)
    needs_hidden_states = property(lambda self: self.inner.needs_hidden_states)
    hidden_layers = property(lambda self: self.inner.hidden_layers)
    supports_trees = property(lambda self: self.inner.supports_trees)
    max_speculative_tokens = property(lambda self: self.inner.max_speculative_tokens)
    draft_ids = property(lambda self: self.inner.draft_ids)
    forward_why = property(lambda self: self.inner.forward_why)
    default_num_speculative_tokens = property(lambda self: self.inner.default_num_speculative_tokens)

    def max_tree_nodes(self, tree: TreeConfig) -> int:
        return self.inner.max_tree_nodes(tree)

    def as_assistant_model(self):
        return self.inner.as_assistant_model()

    def own_model(self):
        return self.inner.own_model()

    def linear_modules(self):
        return self.inner.linear_modules()

    def start(self, prompt, max_length, hidden=None) -> None:
        self.inner.start(prompt, max_length, hidden)

    def propose(self, seq, k, sampling, generator, tree=None) -> Proposal:
        return self.inner.propose(seq, k, sampling, generator, tree)

    def accept(self, num_accepted, hidden=None) -> None:
        self.inner.accept(num_accepted, hidden)


def kind_default_k(kind: str, cap: int | None) -> int:
    """The K a drafter of `kind` drafts when none is given: its registry entry's `default_k`, at
    most `cap` (Medusa: its heads; a block drafter: its block)."""
    from draftsmith.kinds import KINDS, Kind

    k = KINDS[kind].default_k if kind in KINDS else Kind.default_k
    return k if cap is None else max(1, min(k, int(cap)))


def speculative_cap(drafter: Drafter | None) -> int | None:
    """The most tokens `drafter` drafts per step (`max_speculative_tokens`), None: no limit."""
    cap = None if drafter is None else drafter.max_speculative_tokens
    return int(cap) if cap else None


def default_num_speculative_tokens(drafter: Drafter | None) -> int:
    """The K drafted per step when none is given: the drafter's own default (its kind's
    `default_k` in draftsmith/kinds.py, within its cap); the registry's default without one."""
    return kind_default_k("", None) if drafter is None else int(drafter.default_num_speculative_tokens)


def adaptive_ceiling(drafter: Drafter) -> int:
    """The most tokens an adaptive engine drafts per step when none is given: the drafter's cap,
    else twice its default K (a strong draft's best K often lies above the default)."""
    cap = speculative_cap(drafter)
    return cap if cap is not None else 2 * default_num_speculative_tokens(drafter)


def resolve_num_speculative_tokens(
    drafter: Drafter | None, k: int | None, *, adaptive: bool = False, chain: bool = True, what: str | None = None
) -> int:
    """The one place K is settled (the command line and the Engine both call it): a given K
    checked against the drafter's cap where it drafts chains (a tree's size comes from its
    config); None: the drafter's default, or for an adaptive engine its ceiling
    (`adaptive_ceiling`). Without a drafter: the given K, else the registry's default."""
    if drafter is None:
        return default_num_speculative_tokens(None) if k is None else k
    if k is None:
        return adaptive_ceiling(drafter) if adaptive else default_num_speculative_tokens(drafter)
    if chain:
        check_num_speculative_tokens(
            k, speculative_cap(drafter), what or f"this {drafter.kind} drafter".replace("  ", " ")
        )
    return k


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
