"""Benchmark prompts: a jsonl file, a built-in set, or a `datasets` name.

A row holds either `prompt` (plain text, tokenised as is: a completion prompt) or `messages`
(a chat, rendered with the target's chat template and a generation prompt), and optionally
`domain` (bench breaks acceptance down by it). Built-in sets: `chat`, `code`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from draftsmith.errors import DraftsmithError

BUILTIN_SETS = ("chat", "code")
_DATASET_COLUMNS = ("messages", "conversations", "prompt", "instruction", "question", "text")


@dataclass
class Prompt:
    ids: list[int]
    text: str
    domain: str


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("draftsmith") / "data" / "prompts" / f"{name}.jsonl"))


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DraftsmithError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or not ("prompt" in row or "messages" in row):
            raise DraftsmithError(f"{path}:{lineno}: each line needs a 'prompt' string or a 'messages' list")
        rows.append(row)
    return rows


def _read_dataset(name: str, split: str) -> list[dict]:
    try:
        import datasets

        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # offline, unknown id, missing split: all mean "no such prompt source"
        raise DraftsmithError(
            f"prompts {name!r}: not a file, not a built-in set ({', '.join(BUILTIN_SETS)}), "
            f"and `datasets.load_dataset` failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    column = next((c for c in _DATASET_COLUMNS if c in ds.column_names), None)
    if column is None:
        raise DraftsmithError(f"dataset {name!r} has none of the columns {_DATASET_COLUMNS}; it has {ds.column_names}")
    rows = []
    for value in ds[column]:
        if isinstance(value, list):  # a conversation: drop a trailing assistant turn, prompt the reply
            msgs = [{"role": m.get("role", m.get("from")), "content": m.get("content", m.get("value"))} for m in value]
            while msgs and msgs[-1]["role"] in ("assistant", "gpt"):
                msgs.pop()
            if msgs:
                rows.append({"messages": msgs})
        elif isinstance(value, str) and value.strip():
            rows.append({"messages": [{"role": "user", "content": value}]} if column != "text" else {"prompt": value})
    return rows


def load_prompts(source: str, tokenizer, limit: int | None = None, split: str = "test", max_prompt_tokens: int | None = None) -> list[Prompt]:
    """Tokenised prompts from a jsonl file, a built-in set name, or a `datasets` name."""
    if source in BUILTIN_SETS:
        rows = _read_jsonl(_builtin_path(source))
    elif Path(source).is_file():
        rows = _read_jsonl(Path(source))
    elif Path(source).suffix in (".jsonl", ".json"):
        raise DraftsmithError(f"prompt file not found: {source}")
    else:
        rows = _read_dataset(source, split)
    if not rows:
        raise DraftsmithError(f"no prompts in {source!r}: the file or dataset is empty")
    prompts = []
    for row in rows[:limit] if limit else rows:
        if "messages" in row:
            if getattr(tokenizer, "chat_template", None) is None:
                raise DraftsmithError(f"{source!r} has chat 'messages' but the target's tokenizer has no chat template")
            text = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = row["prompt"]
            ids = tokenizer(text)["input_ids"]
        if not ids:
            raise DraftsmithError(f"{source!r}: a prompt tokenises to nothing: {text[:60]!r}")
        if max_prompt_tokens:
            ids = ids[-max_prompt_tokens:]
        prompts.append(Prompt(ids, text, row.get("domain", "default")))
    return prompts
