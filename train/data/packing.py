"""Token sequences to fixed-length rows: packed end to end, or truncated and padded, each split's
tokens counted."""

from __future__ import annotations

import numpy as np
import torch

from draftsmith.train.data.rows import TokenRows


def _pack(seqs: list[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int, stats: dict, split: str) -> TokenRows:
    """Concatenate rows (masks along) and cut full rows of `length`; the tail remainder is
    dropped (as `group_texts` in transformers' run_clm example) unless no full row exists."""
    ids = np.concatenate([s[0] for s in seqs]) if seqs else np.zeros(0, np.int32)
    mask = np.concatenate([s[1] for s in seqs]) if seqs else np.zeros(0, np.uint8)
    n = len(ids) // length
    if n == 0:  # too little data for one full row: keep it as one padded row rather than nothing
        return _pad([(ids, mask)], length, pad_id, stats, split)
    stats[f"{split}_tail_tokens_dropped"] += len(ids) - n * length
    ids, mask = ids[: n * length].reshape(n, length), mask[: n * length].reshape(n, length)
    return _rows(ids, mask, np.ones_like(mask), stats, split)


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


def _rows(ids: np.ndarray, mask: np.ndarray, attention: np.ndarray, stats: dict, split: str) -> TokenRows:
    """Drop rows with nothing to learn (all-zero loss mask) and count what remains."""
    keep = mask.any(axis=1)
    stats[f"{split}_dropped_no_loss"] += int((~keep).sum())
    rows = TokenRows(*(torch.from_numpy(np.ascontiguousarray(a[keep])) for a in (ids, mask, attention)))
    stats[f"{split}_examples"] = len(rows)
    stats[f"{split}_tokens"] = int(rows.attention_mask.sum())
    stats[f"{split}_loss_tokens"] = int(rows.loss_mask.sum())
    return rows
