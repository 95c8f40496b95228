"""Training DFlash drafters (models/dflash.py): many masked blocks per row, one forward.

DFlash (z-lab 2026, sec. 3; SpecForge's OnlineDFlashModel, specforge/algorithms/common/
dflash_family_model.py) trains the draft exactly as it drafts. Per row, `num_blocks` anchors a
are drawn at random among the positions whose next token is trained; each anchor opens a block

    tokens [x_a, m, ..., m] at positions a .. a+B-1            (B = block_size, m = mask token)

whose queries see the context features of positions < a (strictly: at inference the pending
token's own feature does not exist yet) and the keys of their own block (all of them; with
`causal` only the earlier ones), never another block. Block position k = 1..B-1 is scored on
token a+k with weight w_k = exp(-(k-1)/γ) (`loss_decay` = γ; SpecForge's loss_decay_gamma: the
first positions decide the acceptance length, later ones only count when all before them pass):

    L = Σ w_k · CE(label_{a+k}, softmax(LMHead(o_{a+k}))) / Σ w_k
    (`loss_norm: tokens`: divided by the number of scored positions instead, as speculators does)

with label the target's own distribution for token a+k (`labels: distill`, softmax of its logits
at a+k-1: what the draft must imitate when the data was not written by the target) or the data's
token (`labels: tokens`, the paper's choice on target-regenerated data). With `labels: distill`
the CE may be replaced by another `divergence` (train/recipe.py's DIVERGENCES; fkl is this CE,
tvd is 1 - the expected acceptance). The context features
come from the frozen target, online (a forward per batch) or from an offline cache, through
train/features/ as for EAGLE-3.

Evaluation reports per-position top-1 agreement with the target's argmax and
`simulated_acceptance_length` (1 + the mean number of leading block positions, of K =
logging.acceptance_k, whose argmax matches: greedy chain acceptance on the data's contexts).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated

import torch
from annotated_types import Ge, Interval

from draftsmith.errors import DraftsmithError
from draftsmith.models import require_drafter_kind
from draftsmith.models.dflash import DFlash, DFlashConfig, DFlashModel, default_target_layers, resolve_mask_token
from draftsmith.models.documents import document_ids
from draftsmith.models.eagle import EagleConfig
from draftsmith.train import losses
from draftsmith.train.config import Note, divergence_checks
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.distributed import unwrap
from draftsmith.train.features import OfflineFeatures, OnlineFeatures
from draftsmith.train.tasks.base import TrainingTask


@dataclass
class DFlashTrainConfig:
    """DFlash (z-lab 2026): a block of masked positions filled in one forward, conditioned on
    several target layers' features injected as keys/values into every draft layer."""

    kind: str = "dflash"
    features: str = "online"  # online | a feature cache folder (python -m draftsmith.train.features)
    # indices into the target's hidden_states, 1..L-1; None: z-lab's spread
    aux_layers: list[Annotated[int, Note("any")]] | None = None
    num_layers: Annotated[int, Ge(1)] = 1  # draft decoder layers (z-lab's released drafts: 5 for 8B targets)
    # the pending token + block_size-1 masks: num_speculative_tokens = block_size-1
    block_size: Annotated[int, Ge(2)] = 8
    # None: the tokenizer's mask, an unused embedding row, else pad/eos/unk
    mask_token_id: Annotated[int, Ge(0)] | None = None
    causal: bool = False  # False (DFlash): the block attends to itself both ways; True: causally
    num_blocks: Annotated[int, Ge(1)] = 16  # anchors (blocks) drawn per training row
    labels: str = "distill"  # distill: `divergence` to the target's distribution | tokens: CE on the data's tokens
    divergence: str = "fkl"  # labels distill: fkl (the soft CE) | rkl | jsd | tvd (train/recipe.py's DIVERGENCES)
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    # γ: block position k weighs exp(-(k-1)/γ); 0: every position alike
    loss_decay: Annotated[float, Ge(0), Note("0: every block position weighs the same")] = 4.0
    # weights: Σ w·L / Σ w (SpecForge's); tokens: Σ w·L / scored positions (speculators')
    loss_norm: str = "weights"
    intermediate_size: Annotated[int, Ge(1)] | None = None  # the draft layers' MLP width (None: the target's)
    init: str | None = None  # an existing dflash checkpoint folder to start from
    CHOICES: typing.ClassVar[dict[str, tuple[str, ...]]] = {
        "labels": ("tokens", "distill"),
        "loss_norm": ("weights", "tokens"),
    }

    def checks(self) -> list[tuple[bool, str]]:
        return divergence_checks(self, soft=self.labels == "distill")


def target_layers(cfg: DFlashTrainConfig, target_config) -> tuple[int, ...]:
    """The recipe's aux_layers (or z-lab's spread), checked: outputs of decoder layers 0..L-2."""
    L = target_config.num_hidden_layers
    layers = list(cfg.aux_layers) if cfg.aux_layers is not None else default_target_layers(L, cfg.num_layers)
    bad = [i for i in layers if not 1 <= i <= L - 1]
    if bad or not layers:
        raise DraftsmithError(
            f"drafter.aux_layers {layers}: dflash reads the outputs of the target's decoder layers, "
            f"hidden states 1..{L - 1} of this {L}-layer target (hidden state {L} is after the final "
            f"norm, which serving engines never hand a drafter); {bad} out of range"
        )
    return tuple(layers)


def sample_anchors(
    loss_mask, attention_mask, num_blocks: int, generator, documents=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors [B, N], keep [B, N]): up to `num_blocks` distinct random positions a >= 1 per row
    whose token a+1 is trained and real, sorted; `keep` is False where a row had fewer. With
    `documents` ([B, T] ids of a packed row's conversations), a-1, a and a+1 are in one of them."""
    B, T = loss_mask.shape
    real = attention_mask.bool().cpu()
    valid = torch.zeros(B, T, dtype=torch.bool)
    valid[:, 1 : T - 1] = real[:, 1 : T - 1] & real[:, 2:] & loss_mask.bool().cpu()[:, 2:]
    if documents is not None:
        doc = documents.cpu()
        valid[:, 1 : T - 1] &= (doc[:, :-2] == doc[:, 1:-1]) & (doc[:, 2:] == doc[:, 1:-1])
    counts = valid.sum(1)
    n = max(1, min(num_blocks, int(counts.max())))
    scores = torch.rand(B, T, generator=generator).masked_fill(~valid, 2.0)
    anchors = scores.argsort(1)[:, :n]
    keep = torch.arange(n)[None] < counts.clamp(max=n)[:, None]
    anchors = torch.where(keep, anchors, T).sort(1).values  # kept anchors first, in order
    keep = anchors < T
    device = loss_mask.device
    return torch.where(keep, anchors, 0).to(device), keep.to(device)


def training_mask(anchors, keep, attention_mask, block_size: int, causal: bool, documents=None) -> torch.Tensor:
    """[B, 1, N*B, T + N*B] bool: block n's queries see the real context rows < its anchor (of the
    anchor's conversation, with `documents`) and their own block's keys (causal: up to
    themselves); a dropped block sees only itself."""
    B, N = anchors.shape
    T, Q, device = attention_mask.shape[1], N * block_size, anchors.device
    q_block = torch.arange(Q, device=device) // block_size
    offset = torch.arange(Q, device=device) % block_size
    context = torch.arange(T, device=device)[None, None] < anchors[:, q_block][..., None]  # [B, Q, T]
    context = context & attention_mask.bool()[:, None] & keep[:, q_block][..., None]
    if documents is not None:
        own_doc = documents.gather(1, anchors)[:, q_block]  # [B, Q]
        context = context & (documents[:, None] == own_doc[..., None])
    own = q_block[:, None] == q_block[None]
    if causal:
        own = own & (offset[None] <= offset[:, None])
    return torch.cat([context, own.expand(B, Q, Q)], -1).unsqueeze(1)


class DFlashTask(TrainingTask):
    kind = "dflash"
    drafter_class = DFlash

    def __init__(self, cfg: DFlashTrainConfig, target, seed: int = 0):
        super().__init__(cfg, target, seed)
        self._aux = target_layers(cfg, target.config)
        self.layers = self.feature_layers(cfg, target.config)
        self.model = self._init_model()
        self.online = self.features = OnlineFeatures(target, self.layers)

    @classmethod
    def feature_layers(cls, cfg, target_config) -> tuple[int, ...]:
        # The fused layers, then the last (post-norm) one, from which an offline cache computes
        # the target's logits (online, the forward's logits are used directly).
        return (*target_layers(cfg, target_config), -1)

    def draft_positions(self, T: int, scored: float) -> int:
        """Query positions the draft's layers run on per training row of T tokens (what a plan
        counts): one block of block_size per anchor, up to num_blocks anchors among the trained
        positions (sample_anchors), not one per row token as for the other kinds."""
        return min(self.cfg.num_blocks, max(1, int(scored * T))) * self.cfg.block_size

    def draft_passes(self, T: int, scored: float) -> tuple[float, float]:
        # Every block position is scored: the share of the row that is trained picks the anchors.
        return self.draft_positions(T, scored) / T, 1.0

    def bind_data(self, data, data_cfg) -> None:
        """Open the offline feature cache, where the recipe names one."""
        if self.cfg.features != "online":
            self.features = OfflineFeatures(
                self.cfg.features, self.target, self.layers, data_cfg.max_length, data.train
            )

    # --- building ------------------------------------------------------------------------------

    def _config(self) -> DFlashConfig:
        t, c = self.target, self.cfg
        fields = EagleConfig.layer_fields(t.config)
        if c.intermediate_size:
            fields["intermediate_size"] = c.intermediate_size
        mask = resolve_mask_token(t.tokenizer, t.vocab_size, c.mask_token_id)
        return DFlashConfig(
            vocab_size=t.vocab_size,
            target=t.name,
            hidden_layers=list(self._aux),
            num_hidden_layers=c.num_layers,
            block_size=c.block_size,
            mask_token_id=mask,
            causal=c.causal,
            **fields,
        )

    def _init_model(self) -> DFlashModel:
        init = self.cfg.init
        if init is None:
            model = DFlashModel(self._config())
        else:
            require_drafter_kind(init, self.kind)
            model = self.drafter_class.from_pretrained(init, self.target).model.cpu()
            c = model.config
            for name, have, want in (
                ("reads target layers", list(c.hidden_layers), list(self._aux)),
                ("has block_size", c.block_size, self.cfg.block_size),
                ("has draft layers", c.num_hidden_layers, self.cfg.num_layers),
            ):
                if have != want:
                    raise DraftsmithError(f"drafter.init {init}: {name} {have}, the recipe asks for {want}")
        model.attach_target(self.target.model)
        return model.float().train().requires_grad_(True)

    # --- the loss --------------------------------------------------------------------------------

    def loss(self, model, batch: dict, step: int | None = None):
        training = step is not None
        ids, loss_mask, attn = batch["input_ids"], batch["loss_mask"], batch["attention_mask"]
        unwrapped = unwrap(model)
        c = unwrapped.config
        Bs, (B, T), device = c.block_size, ids.shape, ids.device
        # Fresh anchors every step, reproducible from (seed, step); evaluation always draws the same.
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + (step + 1 if training else 0))
        # Each conversation of a packed row on its own: its positions, its context, its labels.
        rows = batch_positions(batch)
        docs = document_ids(rows)
        anchors, keep = sample_anchors(loss_mask, attn, self.cfg.num_blocks, g, docs)
        N = anchors.shape[1]
        positions = anchors[..., None] + torch.arange(Bs, device=device)  # [B, N, Bs] indices into the row
        # Block position k = 1..Bs-1 predicts token anchor+k: scored where that token is trained,
        # real and in the anchor's conversation.
        label_at = positions[..., 1:]
        inside = label_at < T
        at = label_at.clamp(max=T - 1)
        flat = lambda x: x.gather(1, at.view(B, -1)).view(B, N, Bs - 1)  # noqa: E731
        same = flat(docs) == docs.gather(1, anchors)[..., None]
        scored = keep[..., None] & inside & flat(loss_mask).bool() & flat(attn).bool() & same
        b, n, k = scored.nonzero(as_tuple=True)
        t = label_at[b, n, k]
        # The target's law is read at rows t-1 of the scored tokens only: its LM head runs there
        # (at most num_blocks * (block_size-1) rows of a T-row sequence), not over every position.
        need = torch.zeros(B, T, dtype=torch.bool, device=device)
        need[b, t - 1] = True
        feats = (self.features if training else self.online)(batch, want_logits=True, logit_rows=need)
        context = feats.hidden[..., : len(self._aux) * self.target.config.hidden_size]
        block = torch.full((B, N, Bs), c.mask_token_id, dtype=torch.long, device=device)
        block[..., 0] = ids.gather(1, anchors)
        out = model(
            block.view(B, -1),
            (rows.gather(1, anchors)[..., None] + torch.arange(Bs, device=device)).view(B, -1),
            context,
            rows,
            attention_mask=training_mask(anchors, keep, attn, Bs, c.causal, docs),
        )
        logits = unwrapped.logits(out.view(B, N, Bs, -1)[b, n, k + 1]).float()
        with torch.no_grad():
            target_logits = feats.logits[feats.logit_index[b, t - 1]].float()
            target_top1 = target_logits.argmax(-1)
        if self.cfg.labels == "distill":
            ce = losses.soft_loss(logits, losses.log_probs(target_logits), self.cfg.divergence, self.cfg.jsd_beta)
        else:
            ce = -logits.log_softmax(-1).gather(1, ids[b, t][:, None])[:, 0]
        w = torch.exp(-k.float() / self.cfg.loss_decay) if self.cfg.loss_decay > 0 else torch.ones_like(ce)
        norm = w.sum() if self.cfg.loss_norm == "weights" else w.new_tensor(float(ce.numel()))
        total = (w * ce).sum() / norm.clamp_min(1e-9)
        stats = self._stats(logits.argmax(-1) == target_top1, scored, b, n, k, training)
        stats["loss"] = float(total.detach())
        return total, stats

    def _stats(self, hit, scored, b, n, k, training: bool) -> dict:
        K = scored.shape[-1]
        correct = torch.zeros_like(scored)
        correct[b, n, k] = hit
        stats = {"num_tokens": float(scored[..., 0].sum())}
        for j in range(K):
            m = scored[..., j]
            stats[f"step{j + 1}_top1"] = float(correct[..., j][m].float().sum()) / max(int(m.sum()), 1)
        stats["top1_agreement"] = stats["step1_top1"]
        if not training:
            first = scored[..., 0]
            leading = correct[..., : self.acceptance_k].long().cumprod(-1).sum(-1)
            stats["simulated_acceptance_length"] = 1.0 + (
                float(leading[first].float().mean()) if bool(first.any()) else 0.0
            )
        return stats

    # --- saving: the draft's own weights, never the target's embedding or LM head -------------

    def config_updates(self, model) -> dict:
        return {"target": self.target.name}

    def meta(self, model) -> dict:
        c = model.config
        return {
            "hidden_layers": list(c.hidden_layers),
            "block_size": c.block_size,
            "num_speculative_tokens": c.num_speculative_tokens,
            "mask_token_id": c.mask_token_id,
            "features": "online" if self.cfg.features == "online" else "offline",
            "init": self.cfg.init,
        }


__all__ = ["DFlashTask", "DFlashTrainConfig", "sample_anchors", "target_layers", "training_mask"]
