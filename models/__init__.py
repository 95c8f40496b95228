"""The target wrapper and the drafters, one file per kind (models/<kind>.py), and the
`drafter.json` every checkpoint carries. Which kinds exist, and how a `--draft` value becomes a
drafter, is declared once in train/kinds.py (`KINDS`, `load_drafter`).
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


def require_drafter_kind(init, kind: str) -> dict:
    """drafter.json of a recipe's `drafter.init` folder, which must be a checkpoint of `kind`."""
    meta = read_drafter_meta(init) if pathlib.Path(init).is_dir() else None
    if meta is None:
        raise DraftsmithError(f"drafter.init {init}: not a draftsmith checkpoint folder (no drafter.json)")
    if meta["kind"] != kind:
        raise DraftsmithError(
            f"drafter.init {init}: a {meta['kind']!r} checkpoint, but this recipe trains a {kind!r} drafter"
        )
    return meta


__all__ = [
    "DraftLM",
    "Eagle",
    "Eagle3",
    "Medusa",
    "MedusaHeads",
    "PromptLookup",
    "Target",
    "read_drafter_meta",
    "require_drafter_kind",
    "write_drafter_meta",
]
