"""Training Medusa heads (Cai et al. 2024).

Head k (k = 1..K) reads the target's last hidden state h_t and is scored on token t+k+1 (the
target's own LM head predicts t+1); the loss is Σ_k λ^k L_k (paper, eq. 1, λ = 0.8).

- Medusa-1: the target is frozen; only the heads train (fp32 master weights).
- Medusa-2: the target trains jointly through LoRA: L = L_LM + 0.2 · Σ_k λ^k L_k (paper, sec.
  2.2.2), the heads at a higher learning rate. L_LM is cross-entropy on the data, or (lm_loss kl)
  the KL to the original target's distribution, which with the target's own regenerated data
  (data.regenerate) is the paper's self-distillation recipe (sec. 2.3.2). The checkpoint then
  holds the fine-tuned target beside the heads (target/), and drafter.json says so.

labels: "tokens" scores head k on the data's token t+k+1 (with data.regenerate these are the
target's own tokens); "distill" on the target's distribution at that position,
softmax(target_logits[t+k]) (Medusa-2: the adapted target's, the one that will verify), with
`divergence` (train/recipe.py's DIVERGENCES: fkl, the soft cross-entropy, by default; tvd is
1 - the expected acceptance).
"""

from __future__ import annotations

import copy
import pathlib
import typing
from dataclasses import dataclass, field
from typing import Annotated

import torch
import torch.nn.functional as F
from annotated_types import Ge, Gt, Interval
from torch import nn

from draftsmith.errors import DraftsmithError
from draftsmith.models import require_drafter_kind
from draftsmith.models.documents import document_ids, forward_documents
from draftsmith.models.medusa import NUM_RANKS, Medusa, MedusaHeads
from draftsmith.train import losses
from draftsmith.train.config import LoraConfig, Note, divergence_checks
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.lora import wrap_lora
from draftsmith.train.tasks.base import TrainingTask


@dataclass
class MedusaTrainConfig:
    """Medusa heads on the target's last hidden state (Cai et al. 2024): Medusa-1 trains the heads
    on a frozen target; Medusa-2 trains them jointly with the target through LoRA."""

    kind: str = "medusa"
    num_heads: Annotated[int, Ge(1)] = 4  # K: head k predicts the token k+1 places after the target's own next token
    num_layers: Annotated[int, Ge(0), Note("0: no ResBlock, the LM head alone")] = 1  # ResBlocks per head
    share_lm_head: bool = False  # heads use the target's LM head itself (fewer weights, untrained)
    decay: Annotated[float, Interval(gt=0, le=1)] = 0.8  # λ: head k's loss weight is λ^k
    labels: str = "tokens"  # tokens: CE on the data's tokens; distill: `divergence` to the target's distribution
    divergence: str = "fkl"  # labels distill: fkl | rkl | jsd | tvd (train/recipe.py's DIVERGENCES)
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    mode: str = "medusa1"  # medusa1 | medusa2
    heads_loss_weight: Annotated[float, Gt(0)] = 0.2  # medusa2: L = L_LM + heads_loss_weight * Σ_k λ^k L_k
    heads_lr_multiplier: Annotated[float, Gt(0)] = 4.0  # medusa2: the heads learn at optim.lr * this, LoRA at optim.lr
    lm_loss: str = "ce"  # medusa2: ce on the data's tokens | kl to the original target (self-distillation)
    lora: LoraConfig = field(default_factory=lambda: LoraConfig(r=16))  # medusa2 only
    init: str | None = None  # an existing medusa checkpoint folder to start the heads from
    CHOICES: typing.ClassVar[dict[str, tuple[str, ...]]] = {
        "labels": ("tokens", "distill"),
        "mode": ("medusa1", "medusa2"),
        "lm_loss": ("ce", "kl"),
    }

    def checks(self) -> list[tuple[bool, str]]:
        return [
            (
                self.mode != "medusa2" or self.lora.r > 0,
                "drafter.mode medusa2 trains the target through LoRA: drafter.lora.r must be > 0",
            ),
            *divergence_checks(self, soft=self.labels == "distill"),
        ]


class Medusa2Model(nn.Module):
    """What Medusa-2 trains: the LoRA-wrapped target and the heads, in one module for accelerate."""

    def __init__(self, target: nn.Module, heads: MedusaHeads):
        super().__init__()
        self.target, self.heads = target, heads

    def forward(self, input_ids, position_ids, select):
        """(LM logits [B, T, V], hidden [B, T, d], head logits [K, N, V] at the `select`ed positions);
        position_ids restart at each conversation of a packed row (models/documents.py)."""
        out = forward_documents(self.target, input_ids, position_ids, output_hidden_states=True, use_cache=False)
        hidden = out.hidden_states[-1]
        return out.logits, hidden, self.heads(hidden[select].to(_dtype(self.heads)))


class MedusaTask(TrainingTask):
    kind = "medusa"
    drafter_class = Medusa

    def __init__(self, cfg: MedusaTrainConfig, target, seed: int = 0):
        super().__init__(cfg, target, seed)
        self.version = 2 if cfg.mode == "medusa2" else 1
        self.heads = self._init_heads()
        self.peft_model = None
        from draftsmith.train.preflight import launch_zero_stage  # the accelerate config's, or its DeepSpeed file's

        if self.version == 2 and launch_zero_stage() == 3:
            raise DraftsmithError(
                "drafter.mode medusa2 under DeepSpeed ZeRO-3 is not supported: the fine-tuned target "
                "would be sharded and could not be saved whole; use configs/accelerate/zero2.yaml or ddp.yaml"
            )
        if self.version == 2:
            # In place: the LoRA layers go into the target's own modules, so target.model (what the
            # engine runs when the trainer measures acceptance) is the fine-tuned target too.
            self.peft_model = wrap_lora(target.model, cfg.lora, "the target")
            self.model = Medusa2Model(self.peft_model, self.heads)
        else:
            self.model = self.heads

    # --- building ------------------------------------------------------------------------------

    def _init_heads(self) -> MedusaHeads:
        c, target = self.cfg, self.target
        if c.init is None:
            heads = MedusaHeads.from_target(target.model, c.num_heads, c.num_layers, c.share_lm_head, target.name)
        else:
            require_drafter_kind(c.init, self.kind)
            heads = Medusa.from_pretrained(c.init, target).heads  # checks sizes and tokenizer, wraps load errors
            got = (heads.config.num_heads, heads.config.num_layers, heads.config.share_lm_head)
            if got != (c.num_heads, c.num_layers, c.share_lm_head):
                raise DraftsmithError(
                    f"drafter.init {c.init}: heads/layers/share_lm_head are {got}, the recipe asks for "
                    f"{(c.num_heads, c.num_layers, c.share_lm_head)}"
                )
            heads = heads.cpu()
        heads.config.medusa_version = self.version
        return heads.float().train().requires_grad_(True)

    def trainable_parameters(self):
        heads = [p for p in self.heads.parameters() if p.requires_grad]
        if self.version == 1:
            return heads
        # AdamW param groups: LoRA at optim.lr; the trainer turns lr_multiplier into the heads' lr.
        lora = [p for p in self.peft_model.parameters() if p.requires_grad]
        return [{"params": lora}, {"params": heads, "lr_multiplier": self.cfg.heads_lr_multiplier}]

    # --- the loss --------------------------------------------------------------------------------

    def loss(self, model, batch: dict, step: int | None = None):
        """(loss, stats) for one micro-batch; `step` None (evaluation) adds per-rank accuracies."""
        ids, loss_mask, attn = batch["input_ids"], batch["loss_mask"], batch["attention_mask"]
        positions = batch_positions(batch)  # per conversation of a packed row: none sees another
        counted = label_positions(loss_mask, attn, self.cfg.num_heads, document_ids(positions))  # [K, B, T]
        select = counted.any(0)  # positions some head is scored at
        lm_loss = None
        if self.version == 2:
            lm_logits, _, head_logits = model(input_ids=ids, position_ids=positions, select=select)
            lm_loss = self._lm_loss(lm_logits, ids, loss_mask, positions)
        else:
            with torch.no_grad():
                out = forward_documents(self.target.model, ids, positions, output_hidden_states=True, use_cache=False)
            lm_logits = out.logits
            head_logits = model(out.hidden_states[-1][select].to(_dtype(self.heads)))
        soft = lm_logits.detach() if self.cfg.labels == "distill" else None
        heads_loss, stats = heads_loss_and_stats(
            head_logits,
            counted,
            select,
            ids,
            self.cfg.decay,
            soft,
            ranks=step is None,
            divergence=self.cfg.divergence,
            beta=self.cfg.jsd_beta,
        )
        if lm_loss is None:
            return heads_loss, {"loss": float(heads_loss.detach()), **stats}
        total = lm_loss + self.cfg.heads_loss_weight * heads_loss
        return total, {
            "loss": float(total.detach()),
            "lm_loss": float(lm_loss.detach()),
            "heads_loss": float(heads_loss.detach()),
            **stats,
        }

    def _lm_loss(self, lm_logits, ids, loss_mask, positions):
        # loss_mask is 0 at each conversation's first token: no conversation predicts the next one's
        if self.cfg.lm_loss == "ce":
            return losses.distillation_loss(lm_logits, None, ids, loss_mask, "ce")[0]
        with torch.no_grad(), self.peft_model.disable_adapter():
            original = forward_documents(self.peft_model, ids, positions, use_cache=False).logits
        return losses.distillation_loss(lm_logits, original, ids, loss_mask, "fkl")[0]

    # --- saving and running: the heads (Medusa-2: beside the fine-tuned target) ------------------

    def save_weights(self, model, state_dict, folder: pathlib.Path, evaluation: dict) -> None:
        """The heads, their config carrying the measured head accuracies; Medusa-2 adds the
        fine-tuned target (target/, merged, with the tokenizer) and its adapter (target_adapter/)."""
        heads = self._heads(model)
        if state_dict is not None and self.version == 2:
            state_dict = {k[len("heads.") :]: v for k, v in state_dict.items() if k.startswith("heads.")}
        accuracies = accuracies_from_eval(evaluation, heads.config.num_heads)
        if accuracies is not None:
            heads.config.head_accuracies = accuracies
        heads.config.target = self.target.name
        heads.save_pretrained(folder, state_dict=state_dict)
        if self.version == 2:
            peft_model = model.target
            peft_model.save_pretrained(folder / "target_adapter")
            copy.deepcopy(peft_model).merge_and_unload().save_pretrained(folder / "target")
            self.target.tokenizer.save_pretrained(folder / "target")

    def meta(self, model) -> dict:
        meta = dict(
            medusa_version=self.version,
            num_heads=self._heads(model).config.num_heads,
            labels=self.cfg.labels,
            init=self.cfg.init,
        )
        if self.version == 2:
            meta.update(target_path="target", base_target=self.target.name, lora_r=self.cfg.lora.r)
        return meta

    def build_drafter(self, model, name: str):
        return super().build_drafter(self._heads(model), name)

    def _heads(self, model) -> MedusaHeads:
        return model.heads if self.version == 2 else model


# --- the loss, as plain functions (tested against a brute-force loop) ----------------------------


def label_positions(
    loss_mask: torch.Tensor, attention_mask: torch.Tensor, num_heads: int, documents: torch.Tensor | None = None
) -> torch.Tensor:
    """[K, B, T] bool: head k (row k-1) is scored at position t iff token t+k+1 exists, is a
    training target (loss_mask) and is real (attention mask), and position t is real; with
    `documents` ([B, T] ids of a packed row's conversations), t+k+1 is in t's conversation."""
    B, T = loss_mask.shape
    label_ok = (loss_mask != 0) & (attention_mask != 0)
    real = attention_mask != 0
    counted = torch.zeros(num_heads, B, T, dtype=torch.bool, device=loss_mask.device)
    for k in range(1, num_heads + 1):
        if k + 1 < T:
            counted[k - 1, :, : T - k - 1] = label_ok[:, k + 1 :] & real[:, : T - k - 1]
            if documents is not None:
                counted[k - 1, :, : T - k - 1] &= documents[:, k + 1 :] == documents[:, : T - k - 1]
    return counted


def heads_loss_and_stats(
    head_logits,
    counted,
    select,
    input_ids,
    decay: float,
    target_logits=None,
    ranks: bool = False,
    divergence: str = "fkl",
    beta: float = 0.5,
):
    """Σ_k decay^k · mean L_k, and per-head accuracy stats (L_k: CE on tokens, or `divergence`
    to the target's law with target_logits; fkl is the soft cross-entropy, losses.soft_loss).

    head_logits [K, N, V]: every head at the N positions where `select` [B, T] is set (row-major);
    counted [K, B, T] (label_positions); input_ids [B, T]. With target_logits [B, T, V] head k at
    position t is scored against softmax(target_logits[t+k]) (the target's distribution for
    token t+k+1) and "right" means the target's argmax; else against input_ids[t+k+1].
    """
    K = head_logits.shape[0]
    b, t = select.nonzero(as_tuple=True)
    total = head_logits.new_zeros((), dtype=torch.float32)
    stats: dict[str, float] = {}
    for k in range(1, K + 1):
        rows = counted[k - 1][b, t]  # [N]: which selected positions head k is scored at
        logits = head_logits[k - 1][rows].float()
        n = int(rows.sum())
        if target_logits is None:
            labels = input_ids[b[rows], t[rows] + k + 1]
            per_row = F.cross_entropy(logits, labels, reduction="none")
        else:
            soft = target_logits[b[rows], t[rows] + k].float()
            labels = soft.argmax(-1)
            per_row = losses.soft_loss(logits, losses.log_probs(soft), divergence, beta)
        total = total + decay**k * per_row.sum() / max(n, 1)
        with torch.no_grad():
            top = (
                logits.topk(min(NUM_RANKS, logits.shape[-1]), dim=-1).indices
                if n
                else logits.new_zeros(0, NUM_RANKS, dtype=torch.long)
            )
            hit = top == labels[:, None]  # [n, ranks]: rank r's candidate is the right token
            per_rank = hit.float().sum(0) / max(n, 1)
        stats[f"head{k}_top1"] = float(per_rank[0]) if n else 0.0
        stats[f"head{k}_top5"] = float(per_rank[:5].sum()) if n else 0.0
        if ranks:
            for r in range(NUM_RANKS):
                stats[f"head{k}_rank{r}"] = float(per_rank[r]) if n and r < per_rank.numel() else 0.0
        if k == 1:
            stats["num_tokens"] = float(n)
    stats["top1_agreement"] = stats["head1_top1"]
    return total, stats


def accuracies_from_eval(metrics: dict, num_heads: int) -> list[list[float]] | None:
    """head_accuracies[k-1][r] from the trainer's eval metrics ("eval/head{k}_rank{r}"), if present."""
    if "eval/head1_rank0" not in metrics:
        return None
    return [
        [float(metrics.get(f"eval/head{k}_rank{r}", 0.0)) for r in range(NUM_RANKS)] for k in range(1, num_heads + 1)
    ]


def _dtype(module: nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype
