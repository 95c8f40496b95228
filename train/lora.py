"""LoRA adapters via peft (Hu et al. 2021), for whichever model a task fine-tunes: an independent
draft (draft_lm) or the target itself (Medusa-2)."""

from __future__ import annotations

import warnings

from draftsmith.errors import DraftsmithError

from .config import LoraConfig


def wrap_lora(model, lc: LoraConfig, what: str, extra: str = "peft"):
    """`model` with LoRA adapters on `lc.target_modules` (injected in place, as peft does).
    `what` names the model in errors ("the draft", "the target"); `extra` the pip extra to install."""
    try:
        import peft
    except ImportError:
        raise DraftsmithError(f"LoRA needs peft: pip install 'draftsmith[{extra}]'") from None
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    unknown = [m for m in lc.target_modules if m not in present]
    if unknown:
        raise DraftsmithError(
            f"drafter.lora.target_modules: {unknown} not in {what} (it has e.g. {sorted(present)[:12]})"
        )
    config = peft.LoraConfig(
        r=lc.r,
        lora_alpha=lc.alpha,
        lora_dropout=lc.dropout,
        target_modules=list(lc.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing` (peft's to change, not
        # ours); only that one FutureWarning is muted, and only around this call.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return peft.get_peft_model(model, config)
