"""Drafters and the target wrapper.

One registry, `DRAFTERS`, maps a drafter kind to its class; `load_drafter` turns the command
line's `--draft` value into a drafter for a given target:

    truncated:N          the target's first N layers (draft_lm)
    prompt_lookup[:N]    n-gram lookup in the context, n-grams up to N (default 3)
    a checkpoint folder  written by the trainer: `drafter.json` names its kind and its target
    anything else        a causal LM sharing the target's tokenizer (draft_lm): built-in name,
                         local folder, .gguf file or Hub id
"""

from __future__ import annotations

import json
import pathlib

from draftsmith.errors import DraftsmithError

from .draft_lm import DraftLM
from .eagle import Eagle
from .eagle3 import Eagle3
from .medusa import Medusa, MedusaHeads
from .prompt_lookup import PromptLookup
from .target import Target

DRAFTERS = {"draft_lm": DraftLM, "eagle": Eagle, "eagle3": Eagle3, "medusa": Medusa, "prompt_lookup": PromptLookup}

DRAFTER_META = "drafter.json"  # in every checkpoint the trainer writes: kind, target, step
DRAFTER_META_FORMAT = 1


def write_drafter_meta(folder, kind: str, target: str, **extra) -> None:
    meta = {"format": DRAFTER_META_FORMAT, "kind": kind, "target": target, **extra}
    (pathlib.Path(folder) / DRAFTER_META).write_text(json.dumps(meta, indent=2) + "\n")


def read_drafter_meta(folder) -> dict | None:
    """The checkpoint's `drafter.json`, or None for a folder that is not a draftsmith checkpoint."""
    path = pathlib.Path(folder) / DRAFTER_META
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DraftsmithError(f"{path}: corrupt checkpoint metadata ({e})") from None
    if not isinstance(meta, dict) or "kind" not in meta:
        raise DraftsmithError(f"{path}: corrupt checkpoint metadata (no 'kind')")
    return meta


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
    meta = read_drafter_meta(spec) if pathlib.Path(spec).is_dir() else None
    if meta is not None:
        if meta["kind"] not in DRAFTERS:
            raise DraftsmithError(f"{spec}: a {meta['kind']!r} checkpoint; this version knows {', '.join(DRAFTERS)}")
        return DRAFTERS[meta["kind"]].from_pretrained(spec, target)
    return DraftLM.from_pretrained(spec, target)


__all__ = ["DRAFTERS", "DraftLM", "Eagle", "Eagle3", "Medusa", "MedusaHeads", "PromptLookup", "Target", "load_drafter", "read_drafter_meta", "write_drafter_meta"]
