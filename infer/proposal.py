"""What a drafter hands the engine, and the interface every drafter implements.

Lives in infer/ (the lower layer) so that models/ can import it without infer/ importing models/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .sampling import SamplingConfig


@dataclass
class Proposal:
    """A chain of drafted tokens.

    tokens: [k] long tensor on the target's device (k may be 0: nothing to propose this step).
    probs:  [k, V] draft distributions the tokens were sampled from (after the same
            temperature/top-k/top-p as the target), or None for a deterministic proposal
            (prompt lookup, greedy drafting), which verification treats as one-hot q.
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@runtime_checkable
class Drafter(Protocol):
    """The small interface the engine drives.

    start(prompt, max_length): reset per-request state (caches) for a new prompt [1, L].
    propose(seq, k, sampling, generator): draft up to k tokens continuing `seq` ([1, n]: prompt
        plus every token emitted so far, the last of which the target has not consumed yet).
    accept(num_accepted): told after verification how many drafted tokens were kept, so the
        drafter can roll its own cache back in step with the target's.
    """

    kind: str

    def start(self, prompt: torch.Tensor, max_length: int) -> None: ...

    def propose(
        self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Proposal: ...

    def accept(self, num_accepted: int) -> None: ...
