"""Small file helpers every layer shares: atomic writes, JSON files, an error's first line, the
OSError behind a failed write.

At the bottom of the package beside errors.py: it imports only the standard library, so the
runtime, the models and the registry can use it without loading anything heavy.

An atomic write goes to a temporary file beside its destination (the same filesystem, so the
final `os.replace` is one rename): a reader, or a kill mid-write, sees the old file or the new
one, never half of one.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from collections.abc import Callable


def write_atomic(path, content: str | bytes | Callable[[pathlib.Path], None], sync: bool = False) -> None:
    """Replace `path` with `content` (text, bytes, or a function that writes the temporary path
    it is given) in one rename. `sync`: fsync the file and its folder too, so the new file
    survives a power cut (checkpoints, feature shards); without it a crash may lose the write
    but never leaves a half file under `path`'s name."""
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if callable(content):
            content(tmp)
        elif isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content)
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if sync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json(path, obj, indent: int | None = 2, sync: bool = False) -> None:
    """`obj` as JSON (with a final newline) at `path`, written atomically."""
    write_atomic(path, json.dumps(obj, indent=indent) + "\n", sync=sync)


def read_json(path):
    """The JSON value in `path`; OSError and ValueError (json.JSONDecodeError, UnicodeDecodeError)
    pass through for the caller to name in its own terms."""
    return json.loads(pathlib.Path(path).read_text())


def first_line(e: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, at most `limit` characters: what a one-line
    DraftsmithError quotes of an underlying library's multi-line complaint."""
    text = str(e).strip()
    return (text.splitlines()[0] if text else "")[:limit]


def io_error(e: BaseException) -> OSError | None:
    """The OSError behind a failed write: `e` itself, or the one safetensors reports in its own
    type (SafetensorError "... I/O error: No space left on device (os error 28) ..." from the
    weights transformers' save_pretrained writes); None for any other failure."""
    if isinstance(e, OSError):
        return e
    m = re.search(r"\(os error (\d+)\)", str(e)) if type(e).__name__ == "SafetensorError" else None
    return OSError(int(m.group(1)), os.strerror(int(m.group(1)))) if m else None


__all__ = ["first_line", "io_error", "read_json", "write_atomic", "write_json"]
