"""The regenerated chats as a data file (`data.regenerated_path`): the run that regenerates writes
it, every later run of the same recipe reads it, so training finds the target's replies without
repeating the regeneration's settings (its endpoint URL, its served model).

One JSON line per chat, {"index", "messages"}, as the regeneration cache holds them; also a plain
chat dataset (`data.path` may name it). A row is taken from the file only where it answers the
same non-assistant turns as the dataset's row of that index; the others train as they are, counted.
A chat with an empty reply (from a run before those were refused) is not taken either: counted and
warned of. A file that holds no chat, or a line that is not one, is one error: delete it to regenerate.
"""

from __future__ import annotations

import json
import logging
import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_atomic
from draftsmith.train.config import DataConfig

from .regeneration import chat_entry, has_empty_reply, same_prompts

log = logging.getLogger(__name__)


def saved_path(cfg: DataConfig) -> pathlib.Path | None:
    """The file named by data.regenerated_path (None if unset); a folder there is one error."""
    if not cfg.regenerated_path:
        return None
    path = pathlib.Path(cfg.regenerated_path).expanduser()
    if path.is_dir():
        raise DraftsmithError(
            f"data.regenerated_path {path} is a folder: name a file, e.g. {path / 'regenerated.jsonl'}"
        )
    return path


def read_into(rows: list[dict], path: pathlib.Path) -> tuple[list[dict], dict]:
    """`rows` with the messages of the file's chats of the same index and prompts."""
    saved, empty = {}, {}
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DraftsmithError(f"data.regenerated_path {path} cannot be read: {e.strerror or e}") from None
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            index, messages = chat_entry(line)
        except ValueError:  # not UTF-8 (UnicodeDecodeError), not JSON, or not a chat
            raise DraftsmithError(
                f'data.regenerated_path {path} line {n}: expected {{"index": N, "messages": [{{"role": ..., '
                '"content": "..."}, ...]}; delete it to regenerate'
            ) from None
        (empty if has_empty_reply(messages) else saved)[index] = messages
    if not saved and not empty:
        raise DraftsmithError(f"data.regenerated_path {path} holds no chats: delete it to regenerate")
    out, used, changed = [], 0, 0
    for row in rows:
        messages = saved.get(row["index"])
        if same_prompts(messages, row["messages"]):
            used, changed = used + 1, changed + (messages != row["messages"])
            row = dict(row, messages=messages)
        out.append(row)
    stale = sum(1 for r in rows if r["index"] in saved) - used
    unused = sum(1 for r in rows if r["index"] in empty and r["index"] not in saved)
    if unused:
        log.warning(
            "data.regenerated_path %s: %d chats hold an empty reply (an endpoint's null content): they train on the "
            "dataset's replies; delete the file to regenerate them",
            path,
            unused,
        )
    log.info(
        "data.regenerated_path %s: %d of %d rows read, %d with the target's replies%s",
        path,
        used,
        len(rows),
        changed,
        f"; {stale} rows whose prompts differ from the dataset's train as they are" if stale else "",
    )
    counts = {"regenerated_rows": changed, "regenerated_from_file": used, "regenerated_file_stale_rows": stale}
    if unused:
        counts["regenerated_file_empty_rows"] = unused
    return out, counts


def write(rows: list[dict], path: pathlib.Path) -> None:
    """Every row (regenerated or kept as it was), written whole then renamed into place."""

    def lines(tmp: pathlib.Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({"index": row["index"], "messages": row["messages"]}) + "\n")

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lines, sync=True)
    except OSError as e:
        raise DraftsmithError(
            f"data.regenerated_path {path} cannot be written ({e.strerror or e}); the regenerated chats stay in "
            "the regeneration cache: rerun once it can be written"
        ) from None
    log.info("data.regenerated_path %s: %d chats written; later runs of this recipe train on them", path, len(rows))
