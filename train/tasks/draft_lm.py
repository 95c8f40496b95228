"""Training the independent draft LM: distillation from the frozen target.

The draft learns the target's next-token distribution on the same tokens (fixed data: the
dataset's or the target's own regenerated replies), with a divergence chosen in the recipe
(train/losses.py). DistillSpec (Zhou et al. 2023) shows that which divergence works best depends
on the decoding temperature, and that training on the draft's own samples (on-policy data,
scored by the target) aligns the two where it matters at inference: `data.source: on_policy`
(GKD, Agarwal et al. 2024), on `on_policy_fraction` of the optimizer steps (1 unless set). The
divergence is `drafter.divergence` (train/recipe.py's DIVERGENCES says what each optimises).

`draft_vocab_size` adds a draft vocabulary (FR-Spec, Zhao et al. 2025): the ids of that many target
tokens most frequent where the training data is scored, saved beside the weights, over which the
runtime drafts (models/draft_lm.py). Training itself keeps the whole head: the weights stay a
plain causal LM that engines load, and acceptance measured during training is the full head's.
"""

from __future__ import annotations

import copy
import pathlib
import random
from dataclasses import dataclass, field
from typing import Annotated

import torch
import torch.nn.functional as F
from annotated_types import Ge, Gt, Interval

from draftsmith.errors import DraftsmithError
from draftsmith.models import DraftLM, read_drafter_meta
from draftsmith.models.documents import document_ids, forward_documents
from draftsmith.models.draft_lm import truncate_model, write_draft_vocab
from draftsmith.models.eagle3 import frequent_tokens
from draftsmith.models.sources import check_same_tokenizer, load_causal_lm, load_tokenizer
from draftsmith.train import losses
from draftsmith.train.config import LoraConfig, Note, divergence_checks, take_old_loss_key
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.distributed import unwrap
from draftsmith.train.lora import wrap_lora
from draftsmith.train.tasks.base import TrainingTask


@dataclass
class DraftLMTrainConfig:
    """An independent draft LM distilled from the target (DistillSpec, Zhou et al. 2023)."""

    kind: str = "draft_lm"
    init: str = "truncated:8"  # truncated:N (target's first N layers) or any causal LM with its tokenizer
    lora: LoraConfig = field(default_factory=LoraConfig)
    divergence: str = "fkl"  # fkl | rkl | jsd | tvd | ce (train/recipe.py's DIVERGENCES: what each optimises)
    loss: str | None = None  # deprecated spelling of divergence, still read
    temperature: Annotated[float, Gt(0)] = 1.0
    jsd_beta: Annotated[float, Interval(gt=0, lt=1)] = 0.5
    # share of steps trained on the draft's own samples (data.source on_policy: 1)
    on_policy_fraction: Annotated[float, Interval(ge=0, le=1), Note("0: off-policy only")] = 0.0
    on_policy_tokens: Annotated[int, Ge(1)] = 32  # tokens the draft samples per on-policy sequence
    # > 0: the draft samples (0 would be greedy, not a distribution)
    on_policy_temperature: Annotated[float, Gt(0)] = 1.0
    # draft over this many most frequent target tokens (None: all)
    draft_vocab_size: Annotated[int, Ge(2)] | None = None

    def __post_init__(self):
        take_old_loss_key(self)

    def checks(self) -> list[tuple[bool, str]]:
        return divergence_checks(self, ce=True)


class DraftLMTask(TrainingTask):
    kind = "draft_lm"
    drafter_class = DraftLM

    def __init__(self, cfg: DraftLMTrainConfig, target, seed: int = 0):
        super().__init__(cfg, target, seed)
        self.model = self._init_model()
        self.draft_ids: torch.Tensor | None = None  # the draft vocabulary, once the data is bound
        self.is_lora = cfg.lora.r > 0
        if self.is_lora:
            self.model = wrap_lora(self.model, cfg.lora, "the draft")

    # --- building ------------------------------------------------------------------------------

    def _init_model(self):
        return init_causal_lm(
            self.cfg.init, self.target, accepts=(self.kind,), what=f"but this recipe trains a {self.kind!r} drafter"
        )

    def bind_data(self, data, data_cfg) -> None:
        if self.cfg.draft_vocab_size is None:
            return
        rows = data.train
        size = min(self.cfg.draft_vocab_size, self.target.vocab_size)
        eos = sorted(self.target.eos_token_ids)
        self.draft_ids = frequent_tokens(rows.input_ids, rows.loss_mask, self.target.vocab_size, size, always=eos)

    # --- the loss --------------------------------------------------------------------------------

    def is_on_policy(self, step: int | None) -> bool:
        # Same answer on every rank without communication: a function of (seed, step) only.
        if step is None or self.cfg.on_policy_fraction <= 0:
            return False
        return random.Random(self.seed * 1_000_003 + step).random() < self.cfg.on_policy_fraction

    def loss(self, model, batch: dict, step: int | None = None):
        """(loss, stats) for one micro-batch; `step` None (evaluation) never goes on-policy."""
        input_ids, loss_mask, attention_mask = batch["input_ids"], batch["loss_mask"], batch["attention_mask"]
        positions = batch_positions(batch)  # restarting at each conversation of a packed row

        def forward(lm):  # each conversation on its own (models/documents.py)
            return forward_documents(lm, input_ids, positions, rows_kept=True, use_cache=False)

        if self.is_on_policy(step):
            input_ids, loss_mask, attention_mask = self._on_policy_batch(
                model, input_ids, attention_mask, step, positions
            )

            def forward(lm):  # the cut conversation alone: earlier ones are masked like left padding
                where = (attention_mask.cumsum(1) - 1).clamp(min=0)
                return lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=where, use_cache=False)

        # Both LM heads compute only the rows the loss counts (position t when token t+1 is a
        # training token; never a conversation's first, whose loss mask is 0): the other rows'
        # logits were computed, then dropped.
        counted = loss_mask[:, 1:] != 0
        rows = F.pad(counted, (0, 1))
        with losses.head_on_rows(model, rows):
            draft_rows = forward(model).logits[0]
        target_rows = None
        if self.cfg.divergence != "ce":
            with torch.no_grad(), losses.head_on_rows(self.target.model, rows):
                target_rows = forward(self.target.model).logits[0]
        c = self.cfg
        return losses.rows_loss(
            draft_rows, target_rows, input_ids[:, 1:][counted], c.divergence, c.temperature, c.jsd_beta
        )

    @torch.no_grad()
    def _on_policy_batch(self, model, input_ids, attention_mask, step: int, positions=None):
        """Cut every row at one point, let the draft sample `on_policy_tokens` tokens after it and
        train on those tokens only (DistillSpec's on-policy data; the target scores them in loss()).
        The prefix is the cut conversation's part only: the ones before it in a packed row are
        masked out (as left padding), so the draft and the target see one conversation."""
        n = self.cfg.on_policy_tokens
        length = int(attention_mask.sum(1).min())
        if length < 2:
            return input_ids, torch.zeros_like(input_ids), attention_mask
        rng = random.Random(self.seed * 7919 + step)
        cut = rng.randint(max(1, length // 4), max(1, length - 1))
        prefix = input_ids[:, :cut]
        docs = document_ids(positions[:, :cut]) if positions is not None else torch.zeros_like(prefix)
        own = (docs == docs[:, -1:]).long()  # the cut conversation's tokens
        unwrapped = unwrap(model)
        was_training = unwrapped.training
        unwrapped.eval()
        tok = self.target.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else min(self.target.eos_token_ids)
        out = unwrapped.generate(
            input_ids=prefix,
            attention_mask=own,
            do_sample=True,
            temperature=self.cfg.on_policy_temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=n,
            min_new_tokens=1,
            pad_token_id=pad,
            eos_token_id=sorted(self.target.eos_token_ids),
            synced_gpus=_zero3(),
        )
        unwrapped.train(was_training)
        gen = out[:, cut:]
        # Train on generated tokens up to and including each row's first EOS.
        is_eos = torch.isin(gen, torch.tensor(sorted(self.target.eos_token_ids), device=gen.device))
        after_eos = (is_eos.long().cumsum(1) - is_eos.long()) > 0
        gen_mask = (~after_eos).long()
        loss_mask = torch.cat([torch.zeros_like(prefix), gen_mask], 1)
        return out, loss_mask, torch.cat([own, gen_mask], 1)

    # --- saving: a plain causal-LM folder (LoRA merged; the adapter beside it in adapter/) ---------

    def save_weights(self, model, state_dict, folder: pathlib.Path, evaluation: dict) -> None:
        if self.draft_ids is not None:
            write_draft_vocab(folder, self.draft_ids)
        if not self.is_lora:
            return super().save_weights(model, state_dict, folder, evaluation)
        model.save_pretrained(folder / "adapter")
        copy.deepcopy(model).merge_and_unload().save_pretrained(folder)

    def meta(self, model) -> dict:
        meta = {"init": self.cfg.init, "lora_r": self.cfg.lora.r}
        if self.draft_ids is not None:
            meta["draft_vocab_size"] = int(self.draft_ids.numel())
        return meta


def _zero3() -> bool:
    """Under ZeRO-3 every rank must take part in each generate() step (synced_gpus)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return bool(is_deepspeed_zero3_enabled()) and torch.distributed.is_initialized()


def init_causal_lm(init: str, target, accepts: tuple[str, ...], what: str):
    """The fp32 trainable causal LM a draft-LM-like task starts from: `truncated:N` (the target's
    first N layers), a draftsmith checkpoint of one of the kinds in `accepts`, or any causal LM
    with the target's tokenizer. `what` ends the error for a checkpoint of another kind."""
    if init.startswith("truncated:"):
        arg = init.partition(":")[2]
        if not arg.isdigit():
            raise DraftsmithError(f"drafter.init {init!r}: expected truncated:N with N a number of layers")
        model = truncate_model(target.model, int(arg), target.name)
    else:
        meta = read_drafter_meta(init) if pathlib.Path(init).is_dir() else None
        if meta is not None and meta["kind"] not in accepts:
            raise DraftsmithError(f"drafter.init {init}: a {meta['kind']!r} checkpoint, {what}")
        check_same_tokenizer(load_tokenizer(init), target.tokenizer, init, target.name)
        model = load_causal_lm(init, dtype=torch.float32, device="cpu")
    # Master weights in fp32 whatever the target's dtype: mixed precision casts the compute.
    return model.float().train().requires_grad_(True)
