"""The training-task contract: a drafter kind as the trainer, `draftsmith plan` and
`draftsmith features` see it (one task per kind, train/tasks/<kind>.py, named by the kind's registry
entry in draftsmith/kinds.py: `Kind.task`).

`TrainingTask` declares every member those callers use, each with a documented default, so they
call members directly and never probe a task for one. As with SpecForge's typed providers
(StepProvider, ModelProvider) and speculators' base model classes, the base class owns what every
kind does alike: the one `save()` (weights, the target's tokenizer, drafter.json) and the one
`runtime_drafter()`. A kind subclasses it, builds `model` and answers `loss`; it overrides only
the hooks in which kinds really differ (`config_updates`, `save_weights`, `meta`, `build_drafter`).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any, ClassVar

import torch

from draftsmith.models import write_drafter_meta


class TrainingTask:
    """The trainer's view of a drafter kind.

    __init__(cfg, target, seed): cfg is the recipe's `drafter:` dataclass (the kind's
    `Kind.config`), target the frozen models.Target. A kind's __init__ calls this one, then
    builds `model`, the module that trains (what accelerate prepares and DeepSpeed/FSDP shard).
    """

    kind: ClassVar[str]  # the registry name, written to drafter.json
    drafter_class: ClassVar[type]  # the runtime drafter (models/<kind>.py) a checkpoint loads as
    model: torch.nn.Module

    acceptance_k: int = 4  # the chain length held-out evaluation simulates; the trainer sets logging.acceptance_k
    layers: tuple[int, ...] = ()  # the target hidden states the task reads through train/features/
    train_steps: int = 1  # draft forwards per training row (EAGLE-3: its unrolled training-time-test steps)

    def __init__(self, cfg, target, seed: int = 0):
        self.cfg, self.target, self.seed = cfg, target, seed

    # --- what the task reads --------------------------------------------------------------------

    @classmethod
    def feature_layers(cls, cfg, target_config) -> tuple[int, ...]:
        """The target layers training reads through train/features/, for `recipe` `cfg` on a
        target of `target_config`: what an offline feature cache stores and what the plan counts.
        Default: none (the kind runs the target itself, or not at all)."""
        return ()

    def bind_data(self, data, data_cfg) -> None:
        """Called by the trainer once the data is built, for a task whose model or features
        depend on it (an offline feature cache, EAGLE-3's draft vocabulary). Default: nothing."""

    def draft_passes(self, T: int, scored: float) -> tuple[float, float]:
        """What `draftsmith plan` counts the draft's FLOPs over, per training row of T tokens of
        which a share `scored` is trained: (draft forwards over the row's T positions, the share
        of the drafted positions the loss scores). Default: `train_steps` forwards, scored where
        the data is."""
        return self.train_steps, scored

    # --- training --------------------------------------------------------------------------------

    def trainable_parameters(self) -> Iterable[torch.nn.Parameter] | list[dict]:
        """What the optimizer updates: tensors, or AdamW param groups (a group may carry an
        `lr_multiplier`). Default: every parameter of `model` that requires a gradient."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def loss(self, model: torch.nn.Module, batch: dict, step: int | None = None) -> tuple[torch.Tensor, dict]:
        """(loss, stats) for one batch, `model` being `self.model` as accelerate wrapped it.
        step=None is evaluation: stats then carry the held-out proxies (`token_acceptance`,
        `top1_agreement`, per-position accuracy, `simulated_acceptance_length`).

        batch: [B, T] input_ids, loss_mask, attention_mask and position_ids, and the rows' indices
        ("row"). A packed row holds several conversations, its position_ids restarting at each:
        a kind attends, positions and labels within one (train/data/rows.py batch_positions and
        batch_documents; models/documents.py forward_documents runs a transformers model so)."""
        raise NotImplementedError(f"{type(self).__name__} has no loss()")

    # --- saving ----------------------------------------------------------------------------------

    def save(self, model: torch.nn.Module, state_dict: dict | None, folder: pathlib.Path, extra: dict) -> None:
        """A loadable checkpoint of this kind in `folder`: the weights (`save_weights`), the
        target's tokenizer and drafter.json (the kind, the target, `meta` and the trainer's
        `extra`; the trainer's latest evaluation, `extra["eval"]`, goes to `save_weights`, not
        to the metadata). `state_dict` is the gathered one under ZeRO-3/FSDP, else None."""
        folder = pathlib.Path(folder)
        extra = dict(extra)
        evaluation = extra.pop("eval", None) or {}
        self.save_weights(model, state_dict, folder, evaluation)
        self.target.tokenizer.save_pretrained(folder)
        write_drafter_meta(folder, self.kind, self.target.name, **self.meta(model), **extra)

    def save_weights(self, model, state_dict: dict | None, folder: pathlib.Path, evaluation: dict) -> None:
        """Hook: the model's config and weights. Default: `config_updates` into its config, then
        `save_pretrained`."""
        model.config.update(self.config_updates(model))
        model.save_pretrained(folder, state_dict=state_dict)

    def config_updates(self, model) -> dict[str, Any]:
        """Hook: keys the checkpoint's config.json must carry beyond the model's own. Default: none."""
        return {}

    def meta(self, model) -> dict[str, Any]:
        """Hook: drafter.json's keys beyond the kind and the target, in the order written. Default: none."""
        return {}

    # --- running ---------------------------------------------------------------------------------

    def runtime_drafter(self, model: torch.nn.Module) -> Any:
        """The model under training as a drafter the inference engine runs, not frozen (training
        continues afterwards): the trainer measures acceptance through it (`logging.acceptance_every`)."""
        return self.build_drafter(model, f"{self.kind}@training")

    def build_drafter(self, model: torch.nn.Module, name: str) -> Any:
        """Hook: the runtime drafter over the live `model`. Default: `drafter_class(model, target, name)`."""
        return self.drafter_class(model, self.target, name, freeze=False)


__all__ = ["TrainingTask"]
