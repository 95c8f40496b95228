"""Training PARD: a draft LM adapted to propose K tokens from one forward (arXiv 2504.18583).

The paper (sec. 3.2) turns each training sequence x_0..x_{L-1} into K "copies" laid side by side
in one forward: copy 0 is the sequence itself; copy i (1 <= i < K) is L mask tokens m at the
same positions. A query in copy i at position p stands for "the i-th mask after a context that
ends at x_{p-i}" and is trained to predict x_{p+1}, the token i+1 places after that context:

    query (0, p) attends to x_0..x_p                               (ordinary next-token)
    query (i, p) attends to x_0..x_{p-i} and the masks (j, p-i+j) for j = 1..i   (eq. 3)

which is exactly what the runtime feeds (context, then i masks) at inference. Copy i thus costs
another L queries, so the paper's conditional drop token strategy (COD, sec. 3.3) keeps only
a share max(r^i, r_min) of copy i's queries (r = 0.7, r_min = 0.2 in the paper's recipes),
chosen among those whose predecessor (i-1, p-1) was kept: a mask query is only useful if the
mask chain it attends to is there. Training cost falls from K*L to about L*(1 + sum_i r^i).

We follow the reference implementation (AMD-AIG-AIMA/PARD pard/pard_train.py,
`warp_data_collator`: one mask id for every copy, positions repeat per copy, one COD draw per
batch) with one change of loss: the paper trains with cross-entropy on the data's tokens; here
`loss` may also be a divergence to the frozen target's next-token distribution at the same
position (train/losses.py, as draft_lm distils), which is what acceptance depends on.

The model stays an ordinary causal LM: the layout is built with position ids and a 4D attention
mask only, so the checkpoint loads in transformers and in vLLM's draft_model path unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from annotated_types import Ge, Gt, Interval

from draftsmith.errors import DraftsmithError
from draftsmith.models.documents import document_ids, forward_documents
from draftsmith.models.pard import MASK_KEY, Pard, check_mask_token, choose_mask_token
from draftsmith.train import losses
from draftsmith.train.config import Note, divergence_checks, take_old_loss_key
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.tasks.base import TrainingTask
from draftsmith.train.tasks.draft_lm import init_causal_lm

K_KEY = "pard_num_speculative_tokens"  # config.json: the K the masks were trained for


@dataclass
class PardTrainConfig:
    """PARD (An et al. 2025): a target-independent draft LM that drafts K tokens per forward."""

    kind: str = "pard"
    # truncated:N (target's first N layers), a draft_lm/pard checkpoint, or a causal LM with the target's tokenizer
    init: str = "truncated:8"
    num_speculative_tokens: Annotated[int, Ge(1)] = 8  # K: tokens per forward; trained with K-1 mask copies (paper: 8)
    mask_token: str = "auto"  # auto (see models/pard.py choose_mask_token) | a token id | a token string
    # fkl | rkl | jsd | tvd to the target's distribution, or ce on the data's tokens (the paper's);
    # what each optimises: train/recipe.py's DIVERGENCES
    divergence: str = "fkl"
    loss: str | None = None  # deprecated spelling of divergence, still read
    temperature: Annotated[float, Gt(0)] = 1.0
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    # COD's r: copy i keeps a share max(r^i, min_retention) of its queries
    retention: Annotated[float, Interval(gt=0, le=1), Note("1: no drop, every copy whole")] = 0.7
    min_retention: Annotated[float, Interval(ge=0, le=1), Note("0: no floor")] = 0.2  # COD's r_min

    def __post_init__(self):
        take_old_loss_key(self)

    def checks(self) -> list[tuple[bool, str]]:
        return divergence_checks(self, ce=True)


def cod_layout(length: int, k: int, retention: float, min_retention: float, generator: torch.Generator | None = None):
    """The queries one PARD forward trains: (copy [N], position [N]) long tensors, copy 0 whole.

    Conditional drop (sec. 3.3): copy i keeps ceil-free int(length * max(r^i, r_min)) positions
    (as the reference computes it), drawn among positions p >= i whose (i-1, p-1) was kept.
    """
    copies, positions = [torch.zeros(length, dtype=torch.long)], [torch.arange(length)]
    prev = torch.arange(length)
    for i in range(1, k):
        candidates = prev + 1
        candidates = candidates[candidates < length]  # the reference wraps around; a wrapped query has no context
        if retention >= 1.0:
            keep = candidates
        else:
            n = min(int(length * max(retention**i, min_retention)), len(candidates))
            keep = candidates[torch.randperm(len(candidates), generator=generator)[:n]].sort().values
        if len(keep) == 0:
            break
        copies.append(torch.full_like(keep, i))
        positions.append(keep)
        prev = keep
    return torch.cat(copies), torch.cat(positions)


def pard_attention(copy: torch.Tensor, pos: torch.Tensor, attention_mask: torch.Tensor, documents=None) -> torch.Tensor:
    """Boolean [B, 1, N, N] mask (True: may attend) of eq. 3 over the queries (copy, pos);
    attention_mask [B, L] removes padding keys of copy 0; documents ([B, L] ids of a packed
    row's conversations) keeps a query's context within the conversation its context ends in."""
    qc, qp = copy[:, None], pos[:, None]
    kc, kp = copy[None, :], pos[None, :]
    real = (kc == 0) & (kp <= qp - qc)  # the context: x_0..x_{p-i}
    chain = (kc >= 1) & (kc <= qc) & (kp == qp - qc + kc)  # the masks before this one, and itself
    real = real[None] & attention_mask[:, pos].bool()[:, None, :]
    if documents is not None:  # pos - copy >= 0: copy i holds positions p >= i (cod_layout)
        real = real & (documents[:, pos][:, None, :] == documents[:, pos - copy][:, :, None])
    allowed = real | chain[None]
    eye = torch.eye(len(copy), dtype=torch.bool, device=copy.device)
    return (allowed | eye)[:, None]  # a padding query still sees itself: no empty softmax row


class PardTask(TrainingTask):
    kind = "pard"
    drafter_class = Pard

    def __init__(self, cfg: PardTrainConfig, target, seed: int = 0):
        super().__init__(cfg, target, seed)
        self.model, inherited = self._init_model()
        vocab = self.model.get_input_embeddings().weight.shape[0]
        if vocab != target.model.config.vocab_size:
            raise DraftsmithError(
                f"drafter.init {cfg.init}: vocabulary size {vocab}, the target {target.name} has "
                f"{target.model.config.vocab_size} (vLLM requires them equal)"
            )
        spec = inherited if cfg.mask_token == "auto" and inherited is not None else cfg.mask_token
        self.mask_token_id = choose_mask_token(target.tokenizer, vocab, spec)
        check_mask_token(self.mask_token_id, vocab, target.tokenizer)
        self.model.config.update(self.config_updates(self.model))

    def _init_model(self):
        """(fp32 trainable causal LM, the pard_token of a PARD init or None)."""
        model = init_causal_lm(
            self.cfg.init,
            self.target,
            accepts=("draft_lm", self.kind),
            what="PARD starts from a draft_lm or pard checkpoint, truncated:N, or a causal LM "
            "with the target's tokenizer",
        )
        return model, getattr(model.config, MASK_KEY, None)

    # --- the loss --------------------------------------------------------------------------------

    def loss(self, model, batch: dict, step: int | None = None):
        """(loss, stats) over every kept query of the PARD layout (module docstring).

        stats: loss, num_tokens, token_acceptance / top1_agreement (all copies pooled, vs the
        target) and top1_pos{i}: how often copy i-1's argmax is the target's (position i of a
        drafted block; the runtime accepts position i only after 1..i-1)."""
        input_ids, loss_mask, attention_mask = batch["input_ids"], batch["loss_mask"], batch["attention_mask"]
        b, length = input_ids.shape
        k = self.cfg.num_speculative_tokens
        # One COD draw per batch, the same on every rank: a function of (seed, step); eval is fixed.
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + (step if step is not None else 10**9))
        copy, pos = cod_layout(length, k, self.cfg.retention, self.cfg.min_retention, g)
        device = input_ids.device
        copy, pos = copy.to(device), pos.to(device)
        ids = torch.where(copy == 0, input_ids[:, pos], torch.full_like(input_ids[:, pos], self.mask_token_id))
        # Each conversation of a packed row on its own: its positions, its context, its labels.
        positions = batch_positions(batch)
        docs = document_ids(positions)
        mask = pard_attention(copy, pos, attention_mask, docs)
        draft_logits = model(
            input_ids=ids, attention_mask=_additive(mask, model), position_ids=positions[:, pos], use_cache=False
        ).logits
        # Query (i, p) predicts x_{p+1}: counted where that token is a training target of the
        # conversation the query's context ends in.
        nxt = (pos + 1).clamp(max=length - 1)
        counted = (pos + 1 < length)[None] & (loss_mask[:, nxt] != 0) & (attention_mask[:, nxt] != 0)
        counted = counted & (docs[:, nxt] == docs[:, pos - copy])
        rows = draft_logits[counted]  # [M, V]
        labels = input_ids[:, nxt][counted]
        target_rows = None
        if self.cfg.divergence != "ce" or not model.training:
            with torch.no_grad():
                t_logits = forward_documents(self.target.model, input_ids, positions, use_cache=False).logits
            target_rows = t_logits[:, pos][counted]  # the target's distribution over x_{p+1} given x_0..x_p
            vocab = min(rows.shape[-1], target_rows.shape[-1])
        num = int(counted.sum())
        c = self.cfg
        if c.divergence == "ce":
            per_row = losses.cross_entropy(rows, labels)
        else:
            per_row = losses.divergence(
                rows[:, :vocab], target_rows[:, :vocab], c.divergence, c.temperature, c.jsd_beta
            )
        loss = per_row.sum() / max(num, 1)
        stats = {"loss": float(loss.detach()), "num_tokens": float(num)}
        if target_rows is not None:
            stats.update(_agreement(rows[:, :vocab].detach(), target_rows[:, :vocab], copy.expand(b, -1)[counted], k))
        return loss, stats

    # --- saving and running: a plain causal-LM folder, `pard_token` and the trained K in its config ---

    def config_updates(self, model) -> dict:
        return {MASK_KEY: self.mask_token_id, K_KEY: self.cfg.num_speculative_tokens}

    def meta(self, model) -> dict:
        return {
            "init": self.cfg.init,
            "mask_token_id": self.mask_token_id,
            "num_speculative_tokens": self.cfg.num_speculative_tokens,
        }

    def build_drafter(self, model, name: str):
        drafter = Pard(model, self.target, name, self.mask_token_id, freeze=False)
        drafter.max_speculative_tokens = self.cfg.num_speculative_tokens
        return drafter


def _additive(mask: torch.Tensor, model) -> torch.Tensor:
    """Boolean mask -> additive 0 / dtype-min in the dtype attention computes in: transformers
    uses a 4D mask as given, and the eager path adds it to the scores."""
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else next(model.parameters()).dtype
    if torch.cuda.is_available() and torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)


@torch.no_grad()
def _agreement(rows: torch.Tensor, target_rows: torch.Tensor, copy: torch.Tensor, k: int) -> dict[str, float]:
    p = torch.softmax(target_rows.float(), -1)
    q = torch.softmax(rows.float(), -1)
    n = max(len(rows), 1)
    top1 = p.argmax(-1) == q.argmax(-1)
    out = {"token_acceptance": float(torch.minimum(p, q).sum(-1).sum()) / n, "top1_agreement": float(top1.sum()) / n}
    for i in range(k):  # every key in every batch: the trainer averages a fixed key set
        sel = copy == i
        out[f"top1_pos{i + 1}"] = float(top1[sel].float().mean()) if bool(sel.any()) else 0.0
    return out
