"""`eagle`: EAGLE-1 feature prediction.

EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty")
drafts at the feature level. With f_t the target's last hidden state after its final norm (what
its LM head reads) at position t, and x_{t+1} the token it produced:

    f̂_{t+1} = Layer(FC([E(x_{t+1}); f_t]))        logits_{t+2} = LMHead(f̂_{t+1})

E and LMHead are the target's own (shared, frozen, never saved); FC (2d -> d) and one Llama-style
decoder layer without its input norm (the layout serving engines load, whatever the target's
family) are the draft's weights. Drafting further feeds f̂ back in place of f (sec. 3).
Training: smooth-L1 on f̂ vs the next real feature + 0.1 x cross-entropy to the target's
distribution, with uniform noise on the input features (sec. 4), see train/tasks/eagle.py.

What every EAGLE-family drafter shares -- the config, the draft model's base, the runtime with
its EAGLE-2 dynamic trees -- lives in models/eagle_family.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from draftsmith.errors import DraftsmithError

from .eagle_family import EagleConfig, EagleDrafter, EagleDraftModel
from .layers import DecoderLayer


class EagleModel(EagleDraftModel):
    """EAGLE-1: FC(2d -> d) over [E(token); feature], one decoder layer without input norm, the
    target's LM head. Weight names follow the layout engines load (fc, layers.0.*)."""

    config_class = EagleConfig
    base_model_prefix = "eagle"

    def __init__(self, config: EagleConfig):
        super().__init__(config)
        d = config.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(config, d)])
        self.__dict__["_lm_head"] = None
        self.post_init()

    @property
    def layer(self) -> DecoderLayer:
        return self.layers[0]

    def attach_target(self, target_model) -> None:
        super().attach_target(target_model)
        head = target_model.get_output_embeddings()
        if tuple(head.weight.shape) != (self.config.vocab_size, self.config.hidden_size):
            raise DraftsmithError(
                f"the target's LM head is {tuple(head.weight.shape)}, this eagle draft needs "
                f"({self.config.vocab_size}, {self.config.hidden_size})"
            )
        self.__dict__["_lm_head"] = head

    def fuse(self, features):
        return features

    def layer_inputs(self, emb, h):
        x = self.fc(torch.cat([emb, h], dim=-1))
        return x, x

    def draft_logits(self, out):
        head = self.__dict__["_lm_head"]
        if head is None:
            raise DraftsmithError("this eagle draft uses the target's LM head: call attach_target(target model) first")
        return F.linear(out, head.weight.detach().to(out.dtype))


class Eagle(EagleDrafter):
    """The runtime drafter for EAGLE-1 checkpoints (the shared EAGLE-family runtime)."""

    kind = "eagle"
    model_class = EagleModel


__all__ = ["Eagle", "EagleModel"]
