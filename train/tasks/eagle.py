"""Training EAGLE drafters: EAGLE-1 (feature regression + distillation) here; EAGLE-3
(training-time test) extends it in train/tasks/eagle3.py.

Both read the frozen target's hidden states through train/features/: online (a target forward
per batch, the default) or from an offline cache written once (`drafter.features: DIR`; held-out
batches are always computed online). Row t of the draft reads token t+1 and the target's
feature at t; at step j of an unrolled forward it reads token t+1+j and its own previous output
(models/eagle.py, EagleDraftModel.forward), and is scored on the target's distribution for token
t+2+j, i.e. softmax(target logits at t+1+j).

- EAGLE-1 (Li et al. 2024, sec. 4.2): one step; L = smooth-L1(f̂_{t+1}, f_{t+1}) + 0.1 · CE(p_{t+2},
  LMHead(f̂_{t+1})), with U(-0.1, 0.1) noise on the input features.
- EAGLE-3 (Li et al. 2025, sec. 3.2): n unrolled steps (default 7) with weights 0.8^j, cross-
  entropy only, over the draft vocabulary: the target's distribution restricted to it and
  renormalised.

Both papers' cross-entropy to the target's law is `drafter.divergence: fkl` (the default); rkl,
jsd or tvd replace it (train/losses.py, soft_loss; tvd is 1 - the expected acceptance).

Evaluation unrolls max(n, K) steps for both (K = logging.acceptance_k) and reports the per-step
top-1 agreement with the target's argmax and `simulated_acceptance_length`: 1 + the mean number
of leading steps (of K) whose top-1 matches, i.e. greedy chain acceptance with the data's tokens
as context; the trainer adds the real mean_acceptance_length measured by the runtime.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from annotated_types import Ge, Interval

from draftsmith.models import require_drafter_kind
from draftsmith.models.documents import document_ids
from draftsmith.models.eagle import Eagle, EagleConfig
from draftsmith.train import losses
from draftsmith.train.config import Note, divergence_checks
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.distributed import unwrap
from draftsmith.train.features import OfflineFeatures, OnlineFeatures
from draftsmith.train.tasks.base import TrainingTask
from draftsmith.train.tasks.medusa import label_positions

# drafter.loss_mask_at: which token's loss_mask counts a prediction (scored_positions)
LOSS_MASK_AT = ("label", "input", "feature")


@dataclass
class EagleTrainConfig:
    """EAGLE-1 (Li et al. 2024): one decoder layer predicting the target's next feature (its last
    hidden state after the final norm) from [embedding of the next token; feature]."""

    kind: str = "eagle"
    features: str = "online"  # online | a feature cache folder (python -m draftsmith.train.features)
    # uniform noise U(-noise, noise) on the input features (paper, sec. 4.2)
    noise: Annotated[float, Ge(0), Note("0: no noise")] = 0.1
    feature_loss_weight: Annotated[float, Ge(0), Note("0: no feature loss")] = 1.0  # smooth-L1 on the predicted feature
    # the divergence to the target's distribution (paper: 0.1, cross-entropy)
    cls_loss_weight: Annotated[float, Ge(0), Note("0: no cross-entropy")] = 0.1
    divergence: str = "fkl"  # fkl (the paper's cross-entropy, less the target's entropy) | rkl | jsd | tvd
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    # which token's loss_mask counts a prediction: label (the predicted token's) | input (the last
    # token read: speculators) | feature (the token at the read feature's position: eagle-llm)
    loss_mask_at: str = "label"
    intermediate_size: Annotated[int, Ge(1)] | None = None  # the draft layer's MLP width (None: the target's)
    init: str | None = None  # an existing eagle checkpoint folder to start from
    CHOICES: typing.ClassVar[dict[str, tuple[str, ...]]] = {"loss_mask_at": LOSS_MASK_AT}

    def checks(self) -> list[tuple[bool, str]]:
        return [
            (
                self.feature_loss_weight + self.cls_loss_weight > 0,
                "drafter.feature_loss_weight and drafter.cls_loss_weight must not both be 0",
            ),
            *divergence_checks(self),
        ]


class EagleTask(TrainingTask):
    kind = "eagle"
    drafter_class = Eagle

    def __init__(self, cfg: EagleTrainConfig, target, seed: int = 0):
        super().__init__(cfg, target, seed)
        self.layers = self.feature_layers(cfg, target.config)
        self.model = self._init_model()
        self.online = self.features = OnlineFeatures(target, self.layers)

    # --- what the task reads --------------------------------------------------------------------

    @classmethod
    def feature_layers(cls, cfg, target_config) -> tuple[int, ...]:
        return (-1,)

    def bind_data(self, data, data_cfg) -> None:
        """Open the offline feature cache, where the recipe names one."""
        if self.cfg.features != "online":
            self.features = OfflineFeatures(
                self.cfg.features, self.target, self.layers, data_cfg.max_length, data.train
            )

    # --- building ------------------------------------------------------------------------------

    def _config(self):
        t = self.target
        fields = EagleConfig.layer_fields(t.config)
        if self.cfg.intermediate_size:
            fields["intermediate_size"] = self.cfg.intermediate_size
        return EagleConfig(vocab_size=t.vocab_size, target=t.name, hidden_layers=[-1], **fields)

    def _init_model(self):
        init = self.cfg.init
        if init is None:
            model = self.drafter_class.model_class(self._config())
            self._fresh(model)
        else:
            require_drafter_kind(init, self.kind)
            model = self.drafter_class.from_pretrained(init, self.target).model.cpu()
        model.attach_target(self.target.model)
        return model.float().train().requires_grad_(True)

    def _fresh(self, model) -> None:
        """Initialise a new draft from the target where that helps (EAGLE-3: its LM head rows)."""

    # --- the loss --------------------------------------------------------------------------------

    def loss(self, model, batch: dict, step: int | None = None):
        training = step is not None
        ids, loss_mask, attn = batch["input_ids"], batch["loss_mask"], batch["attention_mask"]
        steps = self.train_steps if training else max(self.train_steps, self.acceptance_k)
        positions = batch_positions(batch)  # per conversation of a packed row: no row sees another's
        # [S, B, T]: row t at step j is scored on token t+2+j of its own conversation
        counted = scored_positions(loss_mask, attn, steps, self.cfg.loss_mask_at, document_ids(positions))
        # The target's law is read at rows t+1+j only: its LM head runs there and nowhere else.
        need = torch.zeros_like(counted[0])
        for j in range(steps):
            need[:, 1 + j :] |= counted[j, :, : need.shape[1] - 1 - j]
        feats = (self.features if training else self.online)(batch, want_logits=True, logit_rows=need)
        hidden = feats.hidden.float()
        draft_in = self._draft_features(hidden)
        if training and self.cfg.noise > 0:
            draft_in = draft_in + (torch.rand_like(draft_in) * 2 - 1) * self.cfg.noise
        outs = model(input_ids=ids, features=draft_in, num_steps=steps, position_ids=positions)
        unwrapped = unwrap(model)
        total = hidden.new_zeros(())
        stats: dict[str, float] = {}
        correct = torch.zeros_like(counted)
        # Per needed row, once (not per step): the target's argmax and the law each step is scored on.
        with torch.no_grad():
            target_top1 = feats.logits.argmax(-1)  # [N]
            target_logp = self._target_logp(unwrapped, feats.logits)  # [N, V or draft vocab]
        for j in range(steps):
            b, t = counted[j].nonzero(as_tuple=True)
            n = b.numel()
            pred = outs[j][b, t]
            r = feats.logit_index[b, t + 1 + j]
            step_loss, top1, parts = self._step_loss(
                unwrapped, pred, hidden, b, t + 1 + j, target_logp[r], target_top1[r]
            )
            if j < self.train_steps:
                total = total + self._weight(j) * step_loss
                for key, value in parts.items():
                    stats[key] = stats.get(key, 0.0) + self._weight(j) * value
            correct[j, b, t] = top1
            stats[f"step{j + 1}_top1"] = float(top1.float().sum()) / max(n, 1)
            if j == 0:
                stats["num_tokens"] = float(n)
        stats["loss"] = float(total.detach())
        stats["top1_agreement"] = stats["step1_top1"]
        if not training:
            stats["simulated_acceptance_length"] = simulated_acceptance_length(correct[: self.acceptance_k], counted[0])
        return total, stats

    def _weight(self, j: int) -> float:
        return 1.0

    def _draft_features(self, hidden):
        return hidden

    def _target_logp(self, model, target_logits):
        """[N, V] the target's next-token law as log-probabilities, float32."""
        return losses.log_probs(target_logits)

    def _divergence(self, logits, target_logp):
        """[N] drafter.divergence of the draft's law from the target's (fkl: the paper's cross-entropy)."""
        return losses.soft_loss(logits, target_logp, self.cfg.divergence, self.cfg.jsd_beta)

    def _step_loss(self, model, pred, hidden, b, t_next, target_logp, target_top1):
        """(loss, top-1 agreement [N] bool, loss parts) for one step's predictions `pred` [N, d]
        of the features at rows b, t_next, whose law is `target_logp` [N, V] (argmax `target_top1`)."""
        n = max(pred.shape[0], 1)
        feature = hidden[b, t_next]
        reg = F.smooth_l1_loss(pred.float(), feature, reduction="none").mean(-1).sum() / n
        logits = model.draft_logits(pred).float()
        cls = self._divergence(logits, target_logp).sum() / n
        loss = self.cfg.feature_loss_weight * reg + self.cfg.cls_loss_weight * cls
        with torch.no_grad():
            top1 = logits.argmax(-1) == target_top1
        return loss, top1, {"feature_loss": float(reg.detach()), "cls_loss": float(cls.detach())}

    # --- saving: the draft's own weights, never the target's embedding or LM head -------------

    def config_updates(self, model) -> dict:
        return {"target": self.target.name}

    def meta(self, model) -> dict:
        return {
            "hidden_layers": list(model.config.hidden_layers),
            "features": "online" if self.cfg.features == "online" else "offline",
            "init": self.cfg.init,
        }


def scored_positions(
    loss_mask: torch.Tensor,
    attention_mask: torch.Tensor,
    steps: int,
    at: str,
    documents: torch.Tensor | None = None,
) -> torch.Tensor:
    """[S, B, T] bool: row t is scored at step j, on the target's law at t+1+j (for token t+2+j),
    iff that law and row t are real and the loss mask is set at:

    - "label": token t+2+j, the predicted one (label_positions);
    - "input": token t+1+j, the last one the draft read (speculators' alignment);
    - "feature": token t+j, whose position's feature the row reads (eagle-llm's).

    At a turn's edges they differ: "label" scores exactly the predictions of reply tokens, the
    other two skip the first one or two of each reply and score one or two past its end.
    With `documents` ([B, T] ids of a packed row's conversations) row t and the law it is scored
    on lie in one conversation."""
    if at == "label":
        return label_positions(loss_mask, attention_mask, steps, documents)
    offset = LOSS_MASK_AT.index(at)  # 1: input, 2: feature ... as t+2+j minus the token's index
    B, T = loss_mask.shape
    real = attention_mask != 0
    ok = (loss_mask != 0) & real
    counted = torch.zeros(steps, B, T, dtype=torch.bool, device=loss_mask.device)
    for j in range(steps):
        n = T - 1 - j  # rows t whose target law at t+1+j exists
        if n > 0:
            first = 2 + j - offset
            counted[j, :, :n] = ok[:, first : first + n] & real[:, :n] & real[:, 1 + j : 1 + j + n]
            if documents is not None:
                counted[j, :, :n] &= documents[:, 1 + j : 1 + j + n] == documents[:, :n]
    return counted


def simulated_acceptance_length(correct: torch.Tensor, rows: torch.Tensor) -> float:
    """1 + mean over `rows` [B, T] of the number of leading steps whose top-1 was right
    (`correct` [K, B, T]): what a greedy chain of K would accept with these contexts."""
    if not bool(rows.any()):
        return 1.0
    leading = correct.long().cumprod(0).sum(0)  # [B, T]
    return 1.0 + float(leading[rows].float().mean())


__all__ = ["EagleTask", "EagleTrainConfig", "LOSS_MASK_AT", "scored_positions", "simulated_acceptance_length"]
