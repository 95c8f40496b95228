"""What every trained drafter shares (EAGLE, EAGLE-3, Medusa, DFlash, the draft LM, PARD): the
construction the runtime drafters used to repeat.

A drafter answers infer/proposal.py's `Drafter` contract (start, propose, accept, and the
members the runtime reads, with their defaults). This base holds the model (frozen for
inference; live while the trainer measures acceptance on it), the target and the name it was
loaded by; a kind sets its contract members: `kind`, `needs_hidden_states`, `hidden_layers`,
`supports_trees`, and the ONE cap on the tokens it drafts per step, `max_speculative_tokens`
(None: no cap; Medusa: its heads; DFlash: its block; PARD: its trained K), which
`infer.proposal.check_num_speculative_tokens` holds every command to. The K it drafts when none
is given, `default_num_speculative_tokens`, is its kind's `default_k` (draftsmith/kinds.py)
within that cap.
"""

from __future__ import annotations

from draftsmith.infer.proposal import Drafter, kind_default_k

from .target import compile_decode


class TrainedDrafter(Drafter):
    def __init__(self, model, target, name: str, freeze: bool = True):
        # freeze=False: the trainer measures real acceptance on the live model it is training.
        self.model = model.eval().requires_grad_(False) if freeze else model
        self.target, self.name = target, name
        self.target_vocab = target.vocab_size

    def compiled(self, forward):
        """`forward` compiled (fixed shapes, CUDA graphs) when the target runs compiled, else None:
        drafting then runs eagerly, as it does on CPU."""
        return compile_decode(forward) if getattr(self.target, "compiled", False) else None


def default_num_speculative_tokens(kind: str, cap: int | None) -> int:
    """The K a drafter of `kind` drafts when none is given: its registry entry's `default_k`, at
    most `cap` (Medusa: its heads; a block drafter: its block)."""
    return kind_default_k(kind, cap)


__all__ = ["TrainedDrafter", "default_num_speculative_tokens"]
