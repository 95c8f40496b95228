"""`prompt_lookup`: training-free n-gram drafting from the context itself.

As transformers' prompt lookup decoding (Saxena 2023) and vLLM's `ngram` method: find an
earlier occurrence of the context's last n tokens (n from `max_ngram` down to `min_ngram`) and
propose the tokens that followed it. Zero drafting cost, strong on inputs that get copied
(code edits, summaries), near nothing on open chat: the baseline every bench shows. The
proposal is deterministic (one-hot q), which lossless verification handles exactly.
"""

from __future__ import annotations

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer.proposal import Drafter, Proposal
from draftsmith.infer.sampling import SamplingConfig


class PromptLookup(Drafter):
    kind = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.name = f"prompt_lookup:{max_ngram}"

    @classmethod
    def from_spec(cls, spec: str) -> PromptLookup:
        """`--draft prompt_lookup[:N]`: N, the longest n-gram looked up (default 3)."""
        arg = spec.partition(":")[2]
        if arg and not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected prompt_lookup or prompt_lookup:N (max n-gram size)")
        if arg and int(arg) < 1:
            raise DraftsmithError(f"--draft {spec!r}: N, the longest n-gram looked up, must be >= 1")
        return cls(max_ngram=int(arg) if arg else 3)

    def start(self, prompt: torch.Tensor, max_length: int, hidden=None) -> None:
        pass  # stateless

    def propose(self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree=None) -> Proposal:
        ids = seq[0].cpu()
        n_ctx = ids.shape[0]
        for n in range(min(self.max_ngram, n_ctx - 1), self.min_ngram - 1, -1):
            windows = ids[: n_ctx - 1].unfold(0, n, 1)  # every n-gram that has a successor
            hits = (windows == ids[n_ctx - n :]).all(-1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n  # most recent occurrence: the freshest context
                cont = ids[start : start + k]
                return Proposal(cont.to(seq.device), None)
        return Proposal(seq.new_empty(0), None)

    def accept(self, num_accepted: int, hidden=None) -> None:
        pass
