"""The offline feature cache: its files, what it is for, and how they are written and opened.

    DIR/settings.json                 what the cache is for; written first, a rerun must match it
    DIR/shard-00000.safetensors       rows [0, shard_rows): one tensor "row.<i>" per row,
                                      [real tokens, len(layers) * d] in bf16, nothing else
    DIR/.shard-00000.safetensors.<pid>.tmp   a shard being written; deleted by the next run
    DIR/manifest.json                 written last: settings + counts + shard row ranges

Token ids, masks and logits are not stored: ids come from the data pipeline (guarded by the
dataset fingerprint), logits are the LM head applied to the stored last layer on the fly.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import pathlib

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import io_error as _io_error
from draftsmith.fileio import write_atomic
from draftsmith.train.distributed import fingerprint

# Bump when the shard layout or the features' meaning changes: older caches are then refused, not
# misread. 3: each conversation of a packed row has its own features (positions from 0, attention
# within it); format 2's saw the conversations before it in the row.
FORMAT = 3
SETTINGS, MANIFEST = "settings.json", "manifest.json"
CACHE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


# What a cache folder holds (vLLM's staging folder and log included): anything else in a folder
# without settings.json means it is not a feature cache.
CACHE_ENTRIES = (SETTINGS, MANIFEST, "shard-*.safetensors", "*.tmp", "vllm", "vllm.log")


def check_cache_folder(out, flag: str = "feature cache folder") -> None:
    """A folder to write a cache into: new, empty, or a feature cache (a rerun resumes it when its
    settings match). Another folder is refused: a typo'd path must not fill it with shards."""
    out = pathlib.Path(out)
    if not out.is_dir() or (out / SETTINGS).exists():
        return
    foreign = sorted(p.name for p in out.iterdir() if not any(fnmatch.fnmatch(p.name, e) for e in CACHE_ENTRIES))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise DraftsmithError(
            f"{flag} {out} holds other files ({shown}) and is not a feature cache: name a new or empty folder"
        )


# --- what a cache is for -------------------------------------------------------------------------


def settings(target, layers, max_length, train_rows, dtype="bfloat16") -> dict:
    """Everything that decides a cache's content: a cache is used only by a run with equal settings.

    The target's identity: the source's revision where it names one, else a hash of the weights
    every run holds (embedding, final norm, LM head: a readers-only target has no others), plus,
    when this process holds the whole target, a hash of all its weights ("weights"), compared only
    where both the cache and the run have it."""
    keys = {
        "format": FORMAT,
        "target": target.name,
        "revision": _revision(target),
        "target_dtype": str(target.dtype).removeprefix("torch."),
        "layers": list(layers),
        "hidden_size": target.config.get_text_config().hidden_size,
        "dtype": dtype,
        "max_length": max_length,
        "dataset_fingerprint": dataset_fingerprint(train_rows),
    }
    if not _source_revision(target) and getattr(target, "parts", "whole") == "whole":
        keys["weights"] = f"params:{fingerprint(target.model)}"
    return keys


def _source_revision(target) -> str | None:
    for attr in ("revision", "commit", "digest", "sha256"):
        value = getattr(target.source, attr, None)
        if value:
            return f"{attr}:{value}"
    return None


def _revision(target) -> str:
    """The source's own revision when it names one, else a hash of the feature readers' weights."""
    from draftsmith.models.readers import reader_modules

    named = _source_revision(target)
    if named:
        return named
    readers = reader_modules(target.model).items()
    return f"readers:{fingerprint((f'{role}.{n}', p) for role, m in readers for n, p in m.named_parameters())}"


def comparable(have: dict, want: dict) -> dict:
    """`want` without the keys one side could not compute (the whole-weights hash of a readers-only run)."""
    return {k: v for k, v in want.items() if k != "weights" or "weights" in have}


def dataset_fingerprint(rows) -> str:
    h = hashlib.sha256()
    for key in ("input_ids", "loss_mask", "attention_mask", "position_ids"):
        t = getattr(rows, key).contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy())
    return h.hexdigest()[:16]


def _refuse_different(where, have: dict, want: dict, fix: str) -> None:
    """One error naming every key of `want` whose value differs in `have` (the cache's); a cache
    of another format is refused first, in words (its other keys may not even exist)."""
    if "format" in want and have.get("format") != want["format"]:
        raise DraftsmithError(
            f"feature cache {where} has format {json.dumps(have.get('format'))}, this draftsmith reads format "
            f"{want['format']} (each conversation of a packed row with its own features): {fix}"
        )
    diff = [k for k in want if have.get(k) != want[k]]
    if diff:
        parts = ", ".join(f"{k} {json.dumps(have.get(k))} (this run: {json.dumps(want[k])})" for k in diff)
        raise DraftsmithError(f"feature cache {where} was written for {parts}: {fix}")


# --- writing and opening its files ------------------------------------------------------------


def _shard_name(i: int) -> str:
    return f"shard-{i:05d}.safetensors"


def _write_atomic(path: pathlib.Path, write) -> None:
    """`write(tmp)` beside `path`, fsync, rename (draftsmith/fileio.py's atomic write, synced): a
    kill leaves no file or the whole file under its name, and nothing half-written under any name."""
    try:
        write_atomic(path, write, sync=True)
    except Exception as e:  # noqa: BLE001 -- safetensors reports a failed write as its own type
        io_error = _io_error(e)
        if io_error is None:
            raise
        full = io_error.errno in (errno.ENOSPC, errno.EDQUOT)
        raise DraftsmithError(
            f"{'disk full' if full else 'cannot write'} ({io_error.strerror or io_error}) while writing {path}: "
            "free space, then rerun the same command (the finished shards are kept)"
        ) from None


def _read_json(path: pathlib.Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DraftsmithError(
            f"{path}: unreadable ({type(e).__name__}: {e}); delete {path.parent} and re-extract"
        ) from None
    if not isinstance(data, dict):
        raise DraftsmithError(f"{path}: corrupt (not a JSON object); delete {path.parent} and re-extract")
    return data


def _opened(path: pathlib.Path):
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own error type, or OSError
        raise DraftsmithError(
            f"{path}: unreadable feature shard ({type(e).__name__}: {str(e)[:200]}); delete it "
            f"and rerun the extraction to rewrite it"
        ) from None
