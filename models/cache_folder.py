"""draftsmith's cache folder and how a folder gets into it safely.

Converted models (models/sources.py) and the tiny test model (models/tiny_random.py) are built
once under `cache_dir()/models/`. A build is atomic (made in a temporary folder beside its
destination, then renamed) and serialised by a file lock, so two DDP ranks starting together
build it once: the second waits, then finds the folder. A marker file written last says the
folder is complete and which conversion format made it.
"""

from __future__ import annotations

import contextlib
import fcntl  # POSIX file locks: draftsmith runs on Linux/macOS
import logging
import os
import pathlib
import shutil
import sys
import tempfile

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import read_json, write_json

logger = logging.getLogger(__name__)

CACHE_ENV = "DRAFTSMITH_CACHE"
MARKER = "draftsmith.json"  # written last into a finished folder: its presence means "complete"
MARKER_FORMAT = 1  # bump to make every cached folder rebuild after a change in how we convert


def cache_dir() -> pathlib.Path:
    """Root of draftsmith's caches: ``$DRAFTSMITH_CACHE`` if set, else ``~/.cache/draftsmith``."""
    return pathlib.Path(os.environ.get(CACHE_ENV) or "~/.cache/draftsmith").expanduser()


def is_complete(folder: pathlib.Path, recipe: int | None = None) -> bool:
    """A folder is usable once its marker exists (written last, then the folder renamed into
    place) and it was made by the current conversion format / recipe."""
    try:
        meta = read_json(folder / MARKER)
    except (OSError, ValueError):
        return False
    return meta.get("format") == MARKER_FORMAT and (recipe is None or meta.get("recipe") == recipe)


def finish(out: pathlib.Path, dest: pathlib.Path, meta: dict) -> None:
    """Check the files a loader needs, write the marker, and move ``out`` to ``dest`` atomically."""
    weights = list(out.glob("*.safetensors"))
    tokenizer = [f for f in ("tokenizer.json", "tokenizer_config.json") if (out / f).is_file()]
    if not (out / "config.json").is_file() or not weights or not tokenizer:
        raise DraftsmithError(
            f"conversion to {dest} produced an incomplete folder (config.json, weights: "
            f"{len(weights)}, tokenizer files: {tokenizer or 'none'}); delete {dest.parent} "
            f"and retry, or report it with your transformers version ({tf_version()})"
        )
    meta = {"format": MARKER_FORMAT, "transformers": tf_version(), **meta}
    write_json(out / MARKER, meta)
    if dest.exists():  # a stale folder from an older format/recipe: we hold the lock
        shutil.rmtree(dest)
    os.replace(out, dest)


@contextlib.contextmanager
def locked(dest: pathlib.Path):
    """Exclusive lock on ``<dest>.lock`` so concurrent processes build ``dest`` once."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            notice(f"waiting for another process that is building {dest}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def temp_dir_beside(dest: pathlib.Path):
    """A scratch dir on the same filesystem as ``dest`` (so the final rename is atomic), removed
    afterwards whatever happens: a failed conversion leaves nothing half-written behind."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def notice(msg: str) -> None:
    """One-time, slow events go to stderr even when the caller never configured logging."""
    if logging.getLogger().hasHandlers():
        logger.info(msg)
    else:
        print(f"[draftsmith] {msg}", file=sys.stderr, flush=True)


def tf_version() -> str:
    import transformers

    return transformers.__version__


def save_here(model, folder: pathlib.Path) -> None:
    """save_pretrained that writes from this process whatever its rank. transformers 5.2x writes
    nothing outside rank 0 of an initialised process group, but the cache is built by whichever
    process holds the lock: a DDP launch on a fresh machine has rank 1 build it half the time."""
    model.should_save_on_this_rank = lambda is_main_process=True: True
    model.save_pretrained(folder)
