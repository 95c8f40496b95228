"""Which rows are trained on: messages normalised (ShareGPT's keys mapped), unusable rows
counted by reason, and the seeded held-out split."""

from __future__ import annotations

import random

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig
from draftsmith.train.data.corpora import SHAREGPT_ROLES


def _normalize(messages, where: str) -> list[dict]:
    """{"role","content"} dicts; ShareGPT {"from","value"} mapped (human/gpt/system). Keys may
    be present as None: Arrow gives every message of a column the union of their fields."""
    out = []
    for m in messages or []:
        role = (m.get("role") or SHAREGPT_ROLES.get(m.get("from"), m.get("from"))) if isinstance(m, dict) else None
        content = next((m[k] for k in ("content", "value") if m.get(k) is not None), "") if role else None
        if not isinstance(role, str) or not isinstance(content, str):
            raise DraftsmithError(
                f"{where}: a message must have a string 'role'/'content' or 'from'/'value'; got {str(m)[:80]!r}"
            )
        out.append({"role": role, "content": content})
    return out


def _filter(rows: list[dict], fmt: str, cfg: DataConfig, stats: dict[str, int]) -> list[dict]:
    """Usable rows, each tagged with its position in `rows` (a stable id for caching and seeds)."""
    kept = []
    for index, row in enumerate(rows):
        if fmt == "text":
            reason = None if isinstance(row["text"], str) and row["text"].strip() else "skipped_empty"
            item = {"index": index, "text": row["text"]}
        else:
            messages = _normalize(row["messages"], f"dataset {cfg.path!r} row {index}")
            reason = _chat_problem(messages, cfg.max_turn_chars)
            item = {"index": index, "messages": messages}
        if reason:
            stats[reason] += 1
        else:
            kept.append(item)
    return kept


def _chat_problem(messages: list[dict], max_turn_chars: int) -> str | None:
    """Why a chat cannot be trained on (the stats key to count it under), or None."""
    if not any(m["content"].strip() for m in messages):
        return "skipped_empty"
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        return "skipped_no_assistant"
    if any(len(m["content"]) > max_turn_chars for m in messages):
        return "skipped_too_long"
    return None


def _split(rows: list[dict], cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    """Seeded shuffle; hold out min(eval_rows, n // 10) rows (at least 1), keep at least 1 for training."""
    if len(rows) < 2:
        raise DraftsmithError(
            f"dataset {cfg.path!r} has {len(rows)} usable row(s) after filtering; "
            f"need at least 2 (one to train on, one held out)"
        )
    shuffled = list(rows)
    random.Random(cfg.seed).shuffle(shuffled)
    n_eval = min(cfg.eval_rows, max(1, len(rows) // 10))
    return shuffled[n_eval:], shuffled[:n_eval]
