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

from .fused import FusedForward, LazyFused
from .target import compile_decode


class TrainedDrafter(Drafter):
    # A kind whose model is a whole causal LM fed its own tokens (the draft LM, PARD) drafts on
    # CPU through models/fused.py's forward where the target decodes with it (the target's
    # forward_impl, same rule): at batch 1 its few-row forwards are per-operator cost as much as
    # the target's. `_compiled` is then the kind's compiled forward (or None).
    fusable = False
    _compiled = None

    def __init__(self, model, target, name: str, freeze: bool = True):
        # freeze=False: the trainer measures real acceptance on the live model it is training.
        self.model = model.eval().requires_grad_(False) if freeze else model
        self.target, self.name = target, name
        self.target_vocab = target.vocab_size
        self._frozen = freeze
        self._fused = LazyFused()

    def _kept_on_transformers(self) -> str | None:
        """Why the draft keeps transformers' forward whatever the model (None: it may fuse)."""
        impl = self.target.forward_impl
        if impl == "transformers":
            return "the target's forward asked for"
        if self._compiled is not None or not self._frozen:
            # training: fusing re-points the projections' weights, which an optimizer or a
            # sharded wrapper owns
            return "compiled, or training"
        if impl == "auto" and self.model.device.type != "cpu":
            return f"{self.model.device.type}: fused only on CPU by default"
        return None

    def fused_forward(self) -> FusedForward | None:
        """The fused forward the draft decodes with, or None (transformers')."""
        if not self.fusable or self._kept_on_transformers() is not None:
            return None
        return self._fused.get(self.model)

    @property
    def forward_why(self) -> str | None:
        return self._fused.describe(self.model, self._kept_on_transformers()) if self.fusable else None

    def own_model(self):
        return self.model

    def linear_modules(self):
        fused = self.fused_forward()
        return fused.linears if fused is not None else self.model

    def compiled(self, forward):
        """`forward` compiled (fixed shapes, CUDA graphs) when the target runs compiled, else None:
        drafting then runs eagerly, as it does on CPU."""
        return compile_decode(forward) if getattr(self.target, "compiled", False) else None


def default_num_speculative_tokens(kind: str, cap: int | None) -> int:
    """The K a drafter of `kind` drafts when none is given: its registry entry's `default_k`, at
    most `cap` (Medusa: its heads; a block drafter: its block)."""
    return kind_default_k(kind, cap)


__all__ = ["TrainedDrafter", "default_num_speculative_tokens"]
