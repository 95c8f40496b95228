"""What the trainer drives: one training task per drafter kind (train/<kind>.py), named by the
kind's registry entry (draftsmith/kinds.py: `Kind.task`).

A task is the trainer's only view of a drafter kind. The trainer, the checkpoint writer and
`draftsmith plan` call exactly the members below; nothing else about a kind reaches them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch


@runtime_checkable
class TrainingTask(Protocol):
    """The trainer's view of a drafter kind.

    __init__(cfg, target, seed): cfg is the recipe's `drafter:` dataclass (the kind's
        `Kind.config`), target the frozen models.Target. Builds `model`, the module that trains
        (what accelerate prepares and DeepSpeed/FSDP shard).
    trainable_parameters(): the parameters the optimizer updates (a LoRA's or heads' only).
    loss(model, batch, step): (loss, stats) for one batch; step=None in evaluation, where stats
        carry the held-out proxies (`token_acceptance`, `top1_agreement`, per-position accuracy).
    save(model, state_dict, folder, extra): a loadable checkpoint of this kind in `folder`
        (the kind's config.json, weights and drafter.json: models.write_drafter_meta).
    runtime_drafter(model): the model under training as a drafter the inference engine runs
        (measured acceptance through the runtime, `logging.acceptance_every`).

    Optional: `bind_data(data, data_cfg)` (a task that needs the data before its model is final:
    EAGLE-3's draft vocabulary, an offline feature cache), `acceptance_k` (the chain length its
    evaluation simulates), `feature_layers(cfg, target_config)` (the target hidden states it
    reads, for offline feature extraction and the plan).
    """

    kind: ClassVar[str]
    model: torch.nn.Module

    def trainable_parameters(self) -> Iterable[torch.nn.Parameter]: ...

    def loss(self, model: torch.nn.Module, batch: dict, step: int | None = None) -> tuple[torch.Tensor, dict]: ...

    def save(self, model: torch.nn.Module, state_dict: dict | None, folder: pathlib.Path, extra: dict) -> None: ...

    def runtime_drafter(self, model: torch.nn.Module) -> Any: ...


__all__ = ["TrainingTask"]
