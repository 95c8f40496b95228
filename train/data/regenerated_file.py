"""The regenerated chats as a data file (`data.regenerated_path`): the run that regenerates writes
it, every later run of the same recipe reads it, so training finds the target's replies without
repeating the regeneration's settings (its endpoint URL, its served model).

One JSON line per chat, {"index", "messages"}, as the regeneration cache holds them; also a plain
chat dataset (`data.path` may name it). A row is taken from the file only where it answers the
same non-assistant turns as the dataset's row of that index; the others train as they are, counted.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig

from .regeneration import same_prompts

log = logging.getLogger(__name__)


def saved_path(cfg: DataConfig) -> pathlib.Path | None:
    return pathlib.Path(cfg.regenerated_path).expanduser() if cfg.regenerated_path else None


def read_into(rows: list[dict], path: pathlib.Path) -> tuple[list[dict], dict]:
    """`rows` with the messages of the file's chats of the same index and prompts."""
    saved = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            saved[int(entry["index"])] = entry["messages"]
        except (ValueError, KeyError, TypeError):
            raise DraftsmithError(
                f'data.regenerated_path {path} line {n}: expected {{"index": N, "messages": [...]}}; '
                "delete the file to regenerate"
            ) from None
    out, used, changed = [], 0, 0
    for row in rows:
        messages = saved.get(row["index"])
        if same_prompts(messages, row["messages"]):
            used, changed = used + 1, changed + (messages != row["messages"])
            row = dict(row, messages=messages)
        out.append(row)
    stale = sum(1 for r in rows if r["index"] in saved) - used
    log.info(
        "data.regenerated_path %s: %d of %d rows read, %d with the target's replies%s",
        path,
        used,
        len(rows),
        changed,
        f"; {stale} rows whose prompts differ from the dataset's train as they are" if stale else "",
    )
    return out, {"regenerated_rows": changed, "regenerated_from_file": used, "regenerated_file_stale_rows": stale}


def write(rows: list[dict], path: pathlib.Path) -> None:
    """Every row (regenerated or kept as it was), written whole then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(part, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"index": row["index"], "messages": row["messages"]}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    log.info("data.regenerated_path %s: %d chats written; later runs of this recipe train on them", path, len(rows))
