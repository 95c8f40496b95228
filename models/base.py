"""What every trained drafter shares (EAGLE, EAGLE-3, Medusa, DFlash, the draft LM, PARD): the
construction the runtime drafters used to repeat, and the class attributes the engine reads.

A drafter answers infer/proposal.py's `Drafter` protocol (start, propose, accept). This base
holds the model (frozen for inference; live while the trainer measures acceptance on it), the
target, the name it was loaded by, and the ONE cap on the tokens it drafts per step:
`max_speculative_tokens` (None: no cap; Medusa: its heads; DFlash: its block; PARD: its trained
K), which `infer.proposal.check_num_speculative_tokens` holds every command to; and the K it
drafts when none is given, `default_num_speculative_tokens`: its kind's `default_k`
(draftsmith/kinds.py) within that cap.
"""

from __future__ import annotations

from .target import compile_decode


class TrainedDrafter:
    kind: str = ""
    needs_hidden_states: bool = False
    hidden_layers: tuple[int, ...] = ()
    supports_trees: bool = False
    max_speculative_tokens: int | None = None

    def __init__(self, model, target, name: str, freeze: bool = True):
        # freeze=False: the trainer measures real acceptance on the live model it is training.
        self.model = model.eval().requires_grad_(False) if freeze else model
        self.target, self.name = target, name
        self.target_vocab = target.vocab_size

    @property
    def default_num_speculative_tokens(self) -> int:
        return default_num_speculative_tokens(self.kind, self.max_speculative_tokens)

    def compiled(self, forward):
        """`forward` compiled (fixed shapes, CUDA graphs) when the target runs compiled, else None:
        drafting then runs eagerly, as it does on CPU."""
        return compile_decode(forward) if getattr(self.target, "compiled", False) else None


def default_num_speculative_tokens(kind: str, cap: int | None) -> int:
    """The K a drafter of `kind` drafts when none is given: its registry entry's `default_k`, at
    most `cap` (Medusa: its heads; a block drafter: its block)."""
    from draftsmith.kinds import KINDS, Kind

    k = KINDS[kind].default_k if kind in KINDS else Kind.default_k
    return k if cap is None else max(1, min(k, int(cap)))


__all__ = ["TrainedDrafter", "default_num_speculative_tokens"]
