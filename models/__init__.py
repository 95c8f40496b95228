"""The target wrapper and the drafters, one file per kind (models/<kind>.py), the checkpoint
reader (models/checkpoint.py) and `load_drafter` (models/drafters.py), which turns a `--draft`
value into a drafter. Which kinds exist is declared once, in draftsmith/kinds.py (`KINDS`).
"""

from __future__ import annotations

from .checkpoint import (
    DRAFTER_META,
    DRAFTER_META_FORMAT,
    Checkpoint,
    checkpoint_identity,
    describe_missing_meta,
    read_drafter_meta,
    require_drafter_kind,
    resolve_checkpoint,
    write_drafter_meta,
)
from .draft_lm import DraftLM
from .drafters import load_drafter
from .eagle import Eagle
from .eagle3 import Eagle3
from .medusa import Medusa, MedusaHeads
from .prompt_lookup import PromptLookup
from .target import Target

__all__ = [
    "DRAFTER_META",
    "DRAFTER_META_FORMAT",
    "Checkpoint",
    "DraftLM",
    "Eagle",
    "Eagle3",
    "Medusa",
    "MedusaHeads",
    "PromptLookup",
    "Target",
    "checkpoint_identity",
    "describe_missing_meta",
    "load_drafter",
    "read_drafter_meta",
    "require_drafter_kind",
    "resolve_checkpoint",
    "write_drafter_meta",
]
