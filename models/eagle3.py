"""`eagle3`: EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large
Language Models via Training-Time Test").

Instead of the top layer's feature, EAGLE-3 fuses three of the target's layers (low, mid, high;
default [2, L//2, L-3], indices into transformers' hidden_states tuple, i.e. the inputs of
decoder layers 2, L//2 and L-3):

    g_t = FC([l_t; m_t; h_t])                                   (3d -> d)
    o_t = Layer(attn input [input_layernorm(E(x_{t+1})); hidden_norm(g_t)], residual g_t)
    logits_{t+2} = LMHead(norm(o_t))                            (over the draft vocabulary)

and the next draft step reads o_t in place of g_t. No feature loss: the draft is trained only on
the target's distribution, over n unrolled steps whose hidden inputs are its own outputs
("training-time test", sec. 3.2; train/tasks/eagle.py). The LM head covers a reduced draft vocabulary,
the target tokens most frequent in the training data: `d2t[i]` is the offset that maps draft id
i to target id i + d2t[i], `t2d` marks the target ids the draft can propose. Both live in the
checkpoint beside the weights, named as SGLang and vLLM load them (fc, midlayer.*, norm, lm_head,
d2t, t2d).
"""

from __future__ import annotations

import torch
from torch import nn

from draftsmith.errors import DraftsmithError

from .eagle_family import EagleConfig, EagleDrafter, EagleDraftModel
from .layers import DecoderLayer, RMSNorm
from .weights import register_config


class Eagle3Config(EagleConfig):
    model_type = "draftsmith_eagle3"

    def __init__(self, draft_vocab_size: int | None = None, target_hidden_size: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.draft_vocab_size = draft_vocab_size or self.vocab_size
        self.target_hidden_size = target_hidden_size or self.hidden_size


def default_aux_layers(num_hidden_layers: int) -> list[int]:
    """Low, mid and high: inputs of decoder layers 2, L//2 and L-3 (EAGLE-3's choice)."""
    L = num_hidden_layers
    return [min(2, L - 1), L // 2, max(L - 3, 0)]


class Eagle3Model(EagleDraftModel):
    config_class = Eagle3Config
    base_model_prefix = "eagle3"

    def __init__(self, config: Eagle3Config):
        super().__init__(config)
        d = config.hidden_size
        self.fc = nn.Linear(len(config.hidden_layers) * config.target_hidden_size, d, bias=False)
        self.midlayer = DecoderLayer(config, 2 * d)
        self.midlayer.input_layernorm = RMSNorm(d, config.rms_norm_eps)
        self.midlayer.hidden_norm = RMSNorm(d, config.rms_norm_eps)
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.lm_head = nn.Linear(d, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer(
            "t2d",
            torch.ones(config.vocab_size, dtype=torch.bool)
            if config.draft_vocab_size == config.vocab_size
            else torch.zeros(config.vocab_size, dtype=torch.bool),
        )
        self.post_init()

    @property
    def layer(self) -> DecoderLayer:
        return self.midlayer

    def fuse(self, features):
        return self.fc(features)

    def layer_inputs(self, emb, h):
        m = self.midlayer
        return torch.cat([m.input_layernorm(emb), m.hidden_norm(h)], dim=-1), h

    def draft_logits(self, out):
        return self.lm_head(self.norm(out))

    def target_ids(self, draft_ids):
        return draft_ids + self.d2t[draft_ids]

    def target_logits(self, out):
        logits = self.draft_logits(out)
        full = logits.new_full((*logits.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy(-1, self.draft_to_target, logits)

    @property
    def draft_to_target(self) -> torch.Tensor:
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def set_vocab(self, draft_ids: torch.Tensor, target_lm_head: nn.Module | None = None) -> None:
        """Use the sorted target ids `draft_ids` as the draft vocabulary (d2t, t2d); start the LM
        head from the target's rows for them, if given."""
        d2t, t2d = vocab_maps(draft_ids, self.config.vocab_size)
        if d2t.shape[0] != self.config.draft_vocab_size:
            raise DraftsmithError(
                f"draft vocabulary of {d2t.shape[0]} ids, the model was built for {self.config.draft_vocab_size}"
            )
        with torch.no_grad():
            self.d2t.copy_(d2t)
            self.t2d.copy_(t2d)
            if target_lm_head is not None:
                self.lm_head.weight.copy_(
                    target_lm_head.weight.detach()[draft_ids.to(target_lm_head.weight.device)].to(self.lm_head.weight)
                )

    def scale_fc_to(self, features: torch.Tensor) -> None:
        """Divide each layer's block of a fresh FC by that layer's typical feature RMS (median over
        the rows of `features` [N, len(layers)*d]). Middle layers of a residual stream run to RMS
        in the hundreds (SmolLM2: ~240, single entries ~2e4): unscaled, a random FC makes the fused
        state huge and the first steps spend themselves shrinking it. Same layout, so engines load it."""
        d = self.config.target_hidden_size
        with torch.no_grad():
            for i in range(len(self.config.hidden_layers)):
                rms = features[:, i * d : (i + 1) * d].float().pow(2).mean(-1).sqrt().median()
                self.fc.weight[:, i * d : (i + 1) * d] /= max(float(rms), 1e-6)


def vocab_maps(draft_ids: torch.Tensor, target_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t, t2d) for the sorted, distinct target ids `draft_ids`: target id = d2t[i] + i."""
    ids = draft_ids.long().cpu()
    if ids.numel() == 0 or bool((ids[1:] <= ids[:-1]).any()):
        raise DraftsmithError("a draft vocabulary is a non-empty list of distinct target ids in increasing order")
    if int(ids[-1]) >= target_vocab_size or int(ids[0]) < 0:
        raise DraftsmithError(
            f"draft vocabulary holds id {int(ids[-1])}, outside the target's vocabulary of {target_vocab_size}"
        )
    # built on the CPU whatever device context is active (a bench building on the GPU met a
    # CUDA arange beside these CPU ids); callers move the maps with the module
    t2d = torch.zeros(target_vocab_size, dtype=torch.bool, device="cpu")
    t2d[ids] = True
    return ids - torch.arange(ids.numel(), device="cpu"), t2d


def check_vocab(d2t: torch.Tensor, t2d: torch.Tensor, target_vocab_size: int, where: str) -> None:
    """One clear error when a checkpoint's draft vocabulary does not fit the target."""
    if t2d.shape[0] != target_vocab_size:
        raise DraftsmithError(
            f"the eagle3 draft in {where} maps a target vocabulary of {t2d.shape[0]} tokens (t2d); "
            f"this target has {target_vocab_size}: it was trained for another target"
        )
    ids = d2t.long().cpu() + torch.arange(d2t.shape[0])
    if int(ids.min()) < 0 or int(ids.max()) >= target_vocab_size:
        raise DraftsmithError(
            f"the eagle3 draft in {where} maps draft ids to target id {int(ids.max())}, outside the "
            f"target's vocabulary of {target_vocab_size} (d2t)"
        )
    expect = torch.zeros(target_vocab_size, dtype=torch.bool)
    expect[ids] = True
    if int(t2d.sum()) != d2t.shape[0] or not torch.equal(expect, t2d.cpu().bool()):
        raise DraftsmithError(f"the eagle3 draft in {where} has d2t and t2d that disagree: a corrupt checkpoint")


def frequent_tokens(input_ids: torch.Tensor, mask: torch.Tensor, vocab_size: int, size: int, always=()) -> torch.Tensor:
    """The `size` target ids seen most often where `mask` is set (ties: lower id first), always
    including `always` (e.g. the EOS ids, which end every reply); sorted ascending."""
    size = min(size, vocab_size)
    counts = torch.bincount(input_ids[mask.bool()].long().flatten(), minlength=vocab_size).double()
    counts[list(always)] = float("inf")
    # Stable descending sort keeps lower ids first among equal counts.
    order = torch.sort(-counts, stable=True).indices
    return order[:size].sort().values


class Eagle3(EagleDrafter):
    """The runtime drafter for EAGLE-3 checkpoints: the shared EAGLE drafting loop, mapping draft
    ids to target ids through d2t."""

    kind = "eagle3"
    model_class = Eagle3Model

    def __init__(self, model: Eagle3Model, target, name: str, freeze: bool = True):
        check_vocab(model.d2t, model.t2d, target.vocab_size, name)
        super().__init__(model, target, name, freeze)


register_config(Eagle3Config)

__all__ = [
    "Eagle3",
    "Eagle3Config",
    "Eagle3Model",
    "check_vocab",
    "default_aux_layers",
    "frequent_tokens",
    "vocab_maps",
]
