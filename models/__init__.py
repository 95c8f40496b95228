"""Drafters and the target wrapper.

One registry, `DRAFTERS`, maps a drafter kind to its class; `load_drafter` turns the command
line's `--draft` value into a drafter for a given target:

    truncated:N          the target's first N layers (draft_lm)
    prompt_lookup[:N]    n-gram lookup in the context, n-grams up to N (default 3)
    anything else        a causal LM sharing the target's tokenizer (draft_lm): built-in name,
                         local folder, .gguf file or Hub id
"""

from __future__ import annotations

from draftsmith.errors import DraftsmithError

from .draft_lm import DraftLM
from .prompt_lookup import PromptLookup
from .target import Target

DRAFTERS = {"draft_lm": DraftLM, "prompt_lookup": PromptLookup}


def load_drafter(spec: str, target: Target):
    kind, _, arg = spec.partition(":")
    if kind == "truncated":
        if not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected truncated:N with N a number of layers")
        return DraftLM.truncated(target, int(arg))
    if kind == "prompt_lookup":
        if arg and not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected prompt_lookup or prompt_lookup:N (max n-gram size)")
        return PromptLookup(max_ngram=int(arg) if arg else 3)
    return DraftLM.from_pretrained(spec, target)


__all__ = ["DRAFTERS", "DraftLM", "PromptLookup", "Target", "load_drafter"]
