"""Raw rows from a dataset: the built-in corpora (train/data/corpora.py), a local
.json/.jsonl/.parquet file or a `datasets` hub id, and a bad file named in one line."""

from __future__ import annotations

import json
import logging
import pathlib
from collections import defaultdict

from draftsmith.errors import DraftsmithError
from draftsmith.models.cache_folder import cache_dir
from draftsmith.train.config import DataConfig
from draftsmith.train.data import corpora

LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_rows(cfg: DataConfig) -> tuple[list[dict], str]:
    """Raw rows (`{"messages": [...]}` or `{"text": str}`, at most `cfg.max_rows`) and their format."""
    rows, fmt, _ = _load(cfg)
    return rows, fmt


def _load(cfg: DataConfig) -> tuple[list[dict], str, dict[str, int]]:
    """Rows, format, and counts of what the loader itself skipped (stdlib's non-UTF-8 files)."""
    builtin = {"chitchat": "chat", "sharegpt": "chat", "stdlib": "text"}.get(cfg.path)
    if builtin and cfg.format not in ("auto", builtin):
        raise DraftsmithError(f"dataset {cfg.path!r} is {builtin} data; data.format={cfg.format} does not apply to it")
    if cfg.path == "chitchat":
        return corpora.load_chitchat(cfg.max_rows), "chat", {}
    if cfg.path == "sharegpt":
        stats = defaultdict(int)
        return corpora.load_sharegpt(corpora.sharegpt_file(), cfg.max_rows, stats), "chat", stats
    if cfg.path == "stdlib":
        rows, not_utf8 = corpora.load_stdlib(cfg.max_rows)
        return rows, "text", {"skipped_not_utf8": not_utf8}
    ds = _open_dataset(cfg)
    if cfg.max_rows is not None:
        ds = ds.select(range(min(cfg.max_rows, len(ds))))
    fmt = _pick_format(cfg, ds.column_names)
    key, column = ("messages", cfg.messages_column) if fmt == "chat" else ("text", cfg.text_column)
    try:
        return [{key: value} for value in list(ds[column])], fmt, {}  # datasets 5.x: a Column object
    except UnicodeDecodeError as e:  # Arrow's json reader takes bytes that are not UTF-8; reading them fails
        local = pathlib.Path(cfg.path).expanduser()
        problem = _json_problem(local) if LOCAL_SUFFIXES.get(local.suffix.lower()) == "json" else None
        raise DraftsmithError(
            f"data file {cfg.path}: {problem}"
            if problem
            else f"dataset {cfg.path!r}: text that is not UTF-8 ({e.reason} at byte {e.start})"
        ) from None


def _open_dataset(cfg: DataConfig):
    """A local .json/.jsonl/.parquet file, or a `datasets` hub id; load failures as one line."""
    import datasets  # slow to import: only when a dataset is really asked for

    local = pathlib.Path(cfg.path).expanduser()
    builder = LOCAL_SUFFIXES.get(local.suffix.lower())
    if builder and not local.is_file():
        raise DraftsmithError(f"data file not found: {cfg.path}")
    # The json builder logs its own ERROR line for a bad file: the error we raise says it better.
    builder_log = logging.getLogger("datasets.packaged_modules.json.json")
    level = builder_log.level
    builder_log.setLevel(logging.CRITICAL)
    try:
        if builder:
            # Arrow conversions of local files go to our cache, not the user's HF cache.
            return datasets.load_dataset(
                builder, data_files=str(local), split="train", cache_dir=str(cache_dir() / "datasets")
            )
        return datasets.load_dataset(cfg.path, cfg.name, split=cfg.split)
    except Exception as e:  # offline, unknown id, bad config or split, unreadable file
        problem = _json_problem(local) if builder == "json" else None
        if problem:  # datasets says "StopIteration" or "An error occurred": name the file and line
            raise DraftsmithError(f"data file {cfg.path}: {problem}") from None
        if type(e).__name__ == "DatasetGenerationError" and e.__cause__ is not None:
            e = e.__cause__  # "An error occurred while generating the dataset" says nothing
        why = (str(e).strip().splitlines() or [""])[0][:200]
        raise DraftsmithError(
            f"dataset {cfg.path!r} could not be loaded: {type(e).__name__}: {why}; "
            f"local alternatives: a .jsonl/.parquet file, sharegpt, chitchat or stdlib"
        ) from None
    finally:
        builder_log.setLevel(level)


def _json_problem(path: pathlib.Path) -> str | None:
    """What is wrong with a .json/.jsonl file that datasets refused (lines counted from 1), or
    None if it reads as JSON lines or as one JSON document."""
    first = None
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if b"\0" in line:
                return f"line {number} holds binary data (a NUL byte), not JSON text"
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"line {number} is not UTF-8 text (byte {e.start + 1}): a binary file?"
            if first is None and text.strip():
                try:
                    json.loads(text.rstrip("\r\n"))
                except ValueError as e:
                    first = f"line {number} is not valid JSON: {e.msg} (column {e.pos + 1})"
    if path.stat().st_size == 0 or first is None and not path.read_text(encoding="utf-8").strip():
        return "the file is empty"
    if first and path.suffix.lower() == ".json":  # maybe one JSON document over many lines
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return None
        except ValueError as e:
            if path.read_text(encoding="utf-8").lstrip()[:1] in "[{" and e.lineno > 1:
                return f"line {e.lineno} is not valid JSON: {e.msg} (column {e.colno})"
    return first


def _pick_format(cfg: DataConfig, columns: list[str]) -> str:
    """`auto`: chat if the messages column exists, else text if the text column does."""
    wanted = {"chat": [cfg.messages_column], "text": [cfg.text_column]}.get(
        cfg.format, [cfg.messages_column, cfg.text_column]
    )
    for column in wanted:
        if column in columns:
            return "chat" if column == cfg.messages_column else "text"
    looked = " or ".join(repr(c) for c in wanted)
    raise DraftsmithError(
        f"dataset {cfg.path!r} has no column {looked} (data.format={cfg.format}); "
        f"its columns: {', '.join(columns)}; set data.messages_column or data.text_column"
    )
