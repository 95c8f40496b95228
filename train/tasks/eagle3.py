"""Training EAGLE-3 drafters (Li et al. 2025, sec. 3.2): training-time test over the draft vocabulary.

EAGLE-3 extends EAGLE-1's task (train/tasks/eagle.py, whose docstring says what both train): the draft
fuses several target layers' features (low, mid, high: `aux_layers`), unrolls `ttt_steps` steps
on its own hidden states with weights `ttt_decay`^j, and is scored by cross-entropy only (or
`drafter.divergence`) over a reduced draft vocabulary: the target's distribution restricted to
the most frequent training tokens and renormalised (`bind_data` picks them, and scales the fusing
layer to the features' size, before the first step).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated

import torch
from annotated_types import Ge, Interval

from draftsmith.errors import DraftsmithError
from draftsmith.models.eagle import EagleConfig
from draftsmith.models.eagle3 import Eagle3, Eagle3Config, default_aux_layers, frequent_tokens
from draftsmith.train import losses
from draftsmith.train.config import Note, divergence_checks
from draftsmith.train.data import collate
from draftsmith.train.tasks.eagle import LOSS_MASK_AT, EagleTask


@dataclass
class Eagle3TrainConfig:
    """EAGLE-3 (Li et al. 2025): fused low/mid/high target features, training-time test over
    `ttt_steps` unrolled steps, a reduced draft vocabulary (d2t/t2d)."""

    kind: str = "eagle3"
    features: str = "online"  # online | a feature cache folder (python -m draftsmith.train.features)
    # indices into the target's hidden_states; None: [2, L//2, L-3]
    aux_layers: list[Annotated[int, Note("any")]] | None = None
    # most frequent target tokens in the training data (capped at the target's vocab)
    draft_vocab_size: Annotated[int, Ge(2)] = 32000
    ttt_steps: Annotated[int, Ge(1)] = 7  # n: steps unrolled on the draft's own hidden states
    ttt_decay: Annotated[float, Interval(gt=0, le=1)] = 0.8  # step j's loss weight is ttt_decay^j
    divergence: str = "fkl"  # fkl (the paper's cross-entropy, less the target's entropy) | rkl | jsd | tvd
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    noise: Annotated[float, Ge(0), Note("0: no noise")] = 0.0  # uniform noise on the input features
    # divide the fresh FC's blocks by each layer's feature RMS (false: the plain init, as speculators)
    scale_fc: bool = True
    # train the LM head (started from the target's rows); false: frozen there, as speculators
    train_lm_head: bool = True
    # label | input | feature: which token's loss_mask counts a prediction (train/tasks/eagle.py, scored_positions)
    loss_mask_at: str = "label"
    # each step's loss divided by its scored tokens (tokens) or by all B*T positions (positions: SpecForge)
    loss_norm: str = "tokens"
    # score rows whose target top-1 is outside the draft vocabulary (false: skip them, as SpecForge)
    score_out_of_vocab: bool = True
    intermediate_size: Annotated[int, Ge(1)] | None = None  # the draft layer's MLP width (None: the target's)
    init: str | None = None  # an existing eagle3 checkpoint folder to start from
    CHOICES: typing.ClassVar[dict[str, tuple[str, ...]]] = {
        "loss_mask_at": LOSS_MASK_AT,
        "loss_norm": ("tokens", "positions"),
    }

    def checks(self) -> list[tuple[bool, str]]:
        return [
            (
                self.aux_layers is None or len(self.aux_layers) >= 1,
                "drafter.aux_layers: give at least one layer (or null for the default)",
            ),
            *divergence_checks(self),
        ]


class Eagle3Task(EagleTask):
    kind = "eagle3"
    drafter_class = Eagle3

    def __init__(self, cfg: Eagle3TrainConfig, target, seed: int = 0):
        self._aux = aux_layers(cfg, target.config)
        super().__init__(cfg, target, seed)

    @classmethod
    def feature_layers(cls, cfg, target_config) -> tuple[int, ...]:
        # The fused layers, then the last (post-norm) one: an offline cache needs it for the
        # target's logits; online the forward's logits are used directly.
        return (*aux_layers(cfg, target_config), -1)

    @property
    def train_steps(self) -> int:
        return self.cfg.ttt_steps

    def _weight(self, j: int) -> float:
        return self.cfg.ttt_decay**j

    def _config(self):
        t = self.target
        fields = EagleConfig.layer_fields(t.config)
        if self.cfg.intermediate_size:
            fields["intermediate_size"] = self.cfg.intermediate_size
        return Eagle3Config(
            vocab_size=t.vocab_size,
            target=t.name,
            hidden_layers=list(self._aux),
            draft_vocab_size=min(self.cfg.draft_vocab_size, t.vocab_size),
            **fields,
        )

    def _init_model(self):
        model = super()._init_model()
        if self.cfg.init is not None and list(model.config.hidden_layers) != list(self._aux):
            raise DraftsmithError(
                f"drafter.init {self.cfg.init}: reads target layers {model.config.hidden_layers}, "
                f"the recipe asks for {list(self._aux)}"
            )
        self._vocab_set = self.cfg.init is not None  # a loaded draft keeps its vocabulary and FC
        model.lm_head.requires_grad_(self.cfg.train_lm_head)
        return model

    def bind_data(self, data, data_cfg) -> None:
        super().bind_data(data, data_cfg)
        if self._vocab_set:
            return
        rows = data.train
        size = self.model.config.draft_vocab_size
        ids = frequent_tokens(
            rows.input_ids, rows.loss_mask, self.target.vocab_size, size, always=sorted(self.target.eos_token_ids)
        )
        self.model.set_vocab(ids, self.target.model.get_output_embeddings())
        self._vocab_set = True
        if not self.cfg.scale_fc:
            return
        sample = collate([rows[i] for i in range(min(4, len(rows)))])
        sample = {k: v.to(self.target.device) for k, v in sample.items()}
        feats = self.features(sample).hidden
        real = sample["attention_mask"].bool()
        self.model.scale_fc_to(self._draft_features(feats)[real].to(self.model.fc.weight.device))

    def _draft_features(self, hidden):
        return hidden[..., : len(self._aux) * self.target.config.hidden_size]

    def _target_logp(self, model, target_logits):
        """The target's law restricted to the draft vocabulary and renormalised: [N, draft vocab]."""
        return losses.log_probs(target_logits[..., model.draft_to_target])

    def loss(self, model, batch: dict, step: int | None = None):
        self._positions = batch["input_ids"].numel()  # loss_norm positions: every row of the batch
        return super().loss(model, batch, step)

    def _step_loss(self, model, pred, hidden, b, t_next, target_logp, target_top1):
        logits = model.draft_logits(pred).float()  # [N, draft vocab]
        per_row = self._divergence(logits, target_logp)
        n = per_row.new_tensor(float(max(pred.shape[0], 1)))
        if not self.cfg.score_out_of_vocab:
            keep = model.t2d[target_top1]
            per_row, n = per_row * keep, keep.sum().clamp_min(1)
        loss = per_row.sum() / (self._positions if self.cfg.loss_norm == "positions" else n)
        with torch.no_grad():
            top1 = model.target_ids(logits.argmax(-1)) == target_top1
        return loss, top1, {}


def aux_layers(cfg: Eagle3TrainConfig, target_config) -> tuple[int, ...]:
    """The recipe's aux_layers (or EAGLE-3's default), checked against the target's depth."""
    L = target_config.num_hidden_layers
    layers = list(cfg.aux_layers) if cfg.aux_layers is not None else default_aux_layers(L)
    bad = [i for i in layers if not 0 <= i <= L]
    if bad:
        raise DraftsmithError(
            f"drafter.aux_layers {layers}: the target has {L} layers, so hidden states 0..{L} "
            f"(i = the input of decoder layer i); {bad} missing"
        )
    return tuple(layers)


__all__ = ["Eagle3Task", "Eagle3TrainConfig", "aux_layers"]
