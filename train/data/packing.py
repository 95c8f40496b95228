"""Token sequences to fixed-length rows: whole conversations packed side by side, or one per row
truncated and padded; each split's tokens counted.

A packed row holds whole conversations, each on its own as serving sees it: `position_ids`
restart at 0 at every conversation, and whatever reads the row (the target's features, every
drafter's attention and labels) keeps to one conversation (train/data/rows.py, `document_ids`).
A conversation is never cut across rows (its second half would lose its context); one longer
than a row is truncated, as padding mode does."""

from __future__ import annotations

import bisect

import numpy as np
import torch

from draftsmith.train.data.rows import TokenRows


def _pack(seqs: list[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int, stats: dict, split: str) -> TokenRows:
    """Place each conversation (truncated to `length`) whole into the row with the least room
    that still holds it (best fit, in data order), else into a new row; rows are right-padded.
    The first token of every conversation is not a training target: nothing of its own precedes it."""
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (room left, row), sorted: rows that are not full
    for i, (ids, _) in enumerate(seqs):
        n = min(len(ids), length)
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            room, r = free.pop(at)
        else:
            room, r = length, len(rows)
            rows.append([])
        rows[r].append(i)
        if room - n > 0:
            bisect.insort(free, (room - n, r))
    ids = np.full((len(rows), length), pad_id, dtype=np.int32)
    mask = np.zeros((len(rows), length), dtype=np.uint8)
    attention = np.zeros((len(rows), length), dtype=np.uint8)
    positions = np.zeros((len(rows), length), dtype=np.int32)
    for r, members in enumerate(rows):
        start = 0
        for i in members:
            s_ids, s_mask = seqs[i]
            n = min(len(s_ids), length)
            stats[f"{split}_truncated_tokens"] += len(s_ids) - n
            ids[r, start : start + n], mask[r, start : start + n] = s_ids[:n], s_mask[:n]
            mask[r, start], attention[r, start : start + n] = 0, 1
            positions[r, start : start + n] = np.arange(n)
            start += n
        # Padding goes on counting the last conversation's positions: it stays in that document,
        # after every real token of it, so no real token sees it (causal attention).
        positions[r, start:] = positions[r, start - 1] + 1 + np.arange(length - start) if start else np.arange(length)
    stats[f"{split}_conversations"] += len(seqs)
    return _rows(ids, mask, attention, stats, split, positions)


def _pad(seqs: list[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int, stats: dict, split: str) -> TokenRows:
    """Truncate each row to `length` and right-pad (attention and loss mask 0 on padding)."""
    ids = np.full((len(seqs), length), pad_id, dtype=np.int32)
    mask = np.zeros((len(seqs), length), dtype=np.uint8)
    attention = np.zeros((len(seqs), length), dtype=np.uint8)
    for r, (s_ids, s_mask) in enumerate(seqs):
        n = min(len(s_ids), length)
        stats[f"{split}_truncated_tokens"] += len(s_ids) - n
        ids[r, :n], mask[r, :n], attention[r, :n] = s_ids[:n], s_mask[:n], 1
    return _rows(ids, mask, attention, stats, split)


def _rows(
    ids: np.ndarray,
    mask: np.ndarray,
    attention: np.ndarray,
    stats: dict,
    split: str,
    positions: np.ndarray | None = None,
) -> TokenRows:
    """Drop rows with nothing to learn (all-zero loss mask) and count what remains."""
    keep = mask.any(axis=1)
    stats[f"{split}_dropped_no_loss"] += int((~keep).sum())
    arrays = (ids, mask, attention) if positions is None else (ids, mask, attention, positions)
    rows = TokenRows(*(torch.from_numpy(np.ascontiguousarray(a[keep])) for a in arrays))
    stats[f"{split}_examples"] = len(rows)
    stats[f"{split}_tokens"] = int(rows.attention_mask.sum())
    stats[f"{split}_loss_tokens"] = int(rows.loss_mask.sum())
    return rows
