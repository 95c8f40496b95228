"""The target wrapper and the drafters, one file per kind (models/<kind>.py), the
`drafter.json` every checkpoint carries, and `load_drafter`, which turns a `--draft` value into a
drafter. Which kinds exist is declared once, in draftsmith/kinds.py (`KINDS`).
"""

from __future__ import annotations

import json
import logging
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
log = logging.getLogger("draftsmith")


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


def resolve_checkpoint(path, flag: str = "checkpoint") -> pathlib.Path:
    """The checkpoint a path names. A checkpoint folder (drafter.json) is itself; a run folder
    (what `draftsmith train --output-dir` wrote) is its best/ when it has one (the checkpoint
    chosen by measured acceptance), else its final/, and one line says which was taken. Any
    other path comes back as given (a model name, a .gguf file, a Hub id: the caller decides).
    The one resolver for generate/eval/bench --draft, export and publish."""
    p = pathlib.Path(path).expanduser()
    if not p.is_dir() or (p / DRAFTER_META).is_file():
        return p
    for name in ("best", "final"):
        if (p / name / DRAFTER_META).is_file():
            log.info("%s %s is a training run: using its %s/ checkpoint", flag, p, name)
            return p / name
    return p


def describe_missing_meta(folder, flag: str) -> str | None:
    """Why `folder` (a folder with no drafter.json) cannot be loaded as a drafter, or None when it
    may be a plain causal LM folder. Says which file is missing instead of a tokenizer's or
    transformers' complaint about a half checkpoint."""
    p = pathlib.Path(folder)
    if not p.is_dir() or (p / DRAFTER_META).is_file():
        return None
    if not any(p.iterdir()):
        return f"{flag} {p}: the folder is empty; name a checkpoint folder (runs/NAME/final) or a model"
    if any(c.is_dir() and (c / DRAFTER_META).is_file() for c in p.iterdir()):
        return f"{flag} {p}: a folder of checkpoints without final/ or best/; name one of them (e.g. {p}/step-N)"
    config = p / "config.json"
    if not config.is_file():
        return f"{flag} {p}: neither a draftsmith checkpoint (no {DRAFTER_META}) nor a model folder (no config.json)"
    try:
        model_type = str(json.loads(config.read_text()).get("model_type", ""))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None  # the model loader names a corrupt config.json
    if model_type.startswith("draftsmith_"):  # one of our drafters' configs: a damaged checkpoint
        return (
            f"{flag} {p}: a damaged {model_type.removeprefix('draftsmith_')} checkpoint: {DRAFTER_META} is missing "
            "(it names the kind and the target); copy it back from the run, or pass another checkpoint"
        )
    return None


def checkpoint_identity(folder) -> dict | None:
    """What a result JSON records about the checkpoint it measured, so `publish --results` can tell
    whether results belong to a checkpoint: its resolved path, kind, target, step and a sha256
    over drafter.json and the weight files. None for a folder that is not a draftsmith checkpoint."""
    import hashlib

    p = pathlib.Path(folder) if folder else None
    meta = read_drafter_meta(p) if p is not None and p.is_dir() else None
    if meta is None:
        return None
    from .weights import weight_files

    h = hashlib.sha256((p / DRAFTER_META).read_bytes())
    for f in weight_files(p):
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return {
        "path": str(p.resolve()),
        "kind": meta["kind"],
        "target": meta.get("target"),
        "step": meta.get("step"),
        "sha256": h.hexdigest(),
    }


def load_drafter(spec: str, target):
    """The command line's `--draft` value as a drafter for `target`:

    truncated:N          the target's first N layers (draft_lm)
    prompt_lookup[:N]    n-gram lookup in the context, n-grams up to N (default 3)
    a checkpoint folder  written by the trainer: `drafter.json` names its kind and its target
    anything else        a causal LM sharing the target's tokenizer (draft_lm): built-in name,
                         local folder, .gguf file or Hub id
    """
    from draftsmith.kinds import KINDS

    kind, _, arg = spec.partition(":")
    if kind == "truncated":
        if not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected truncated:N with N a number of layers")
        return DraftLM.truncated(target, int(arg))
    if kind == "prompt_lookup":
        if arg and not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected prompt_lookup or prompt_lookup:N (max n-gram size)")
        if arg and int(arg) < 1:
            raise DraftsmithError(f"--draft {spec!r}: N, the longest n-gram looked up, must be >= 1")
        return PromptLookup(max_ngram=int(arg) if arg else 3)
    spec = str(resolve_checkpoint(spec, "--draft"))
    problem = describe_missing_meta(spec, "--draft")
    if problem:
        raise DraftsmithError(problem)
    meta = read_drafter_meta(spec) if pathlib.Path(spec).is_dir() else None
    if meta is not None:
        if meta["kind"] not in KINDS:
            raise DraftsmithError(f"{spec}: a {meta['kind']!r} checkpoint; this version knows {', '.join(KINDS)}")
        return KINDS[meta["kind"]].drafter.from_pretrained(spec, target)
    return DraftLM.from_pretrained(spec, target)


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
    "checkpoint_identity",
    "describe_missing_meta",
    "load_drafter",
    "read_drafter_meta",
    "require_drafter_kind",
    "resolve_checkpoint",
    "write_drafter_meta",
]
