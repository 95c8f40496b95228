"""The training rows as the trainer takes them: fixed-length token tensors, and the batch collation."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from draftsmith.evaluation.prompts import Prompt
from draftsmith.models.documents import document_ids, row_positions


@dataclass
class TrainData:
    train: torch.utils.data.Dataset
    eval: torch.utils.data.Dataset
    eval_prompts: list[Prompt]
    stats: dict[str, int] = field(default_factory=dict)


class TokenRows(torch.utils.data.Dataset):
    """Fixed-length rows kept as [N, L] tensors (int32 ids and positions, uint8 masks), not Python
    lists. `loss_mask[t] = 1` marks token t as a training target (predicted from the tokens
    before it, in its own document); `position_ids` restart at 0 at each document a packed row
    holds (default: 0..L-1, one document a row). Items also carry their index, "row": the key of
    a row's cached target features."""

    KEYS = ("input_ids", "loss_mask", "attention_mask", "position_ids")

    def __init__(self, input_ids, loss_mask, attention_mask, position_ids=None):
        self.input_ids, self.loss_mask, self.attention_mask = input_ids, loss_mask, attention_mask
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], dtype=torch.int32).expand(input_ids.shape).contiguous()
        self.position_ids = position_ids

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {k: getattr(self, k)[i].long() for k in self.KEYS}
        return item | {"row": torch.tensor(int(i))}


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    """Stack equal-length items into [B, L] tensors (rows are already max_length)."""
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


def batch_positions(batch: dict) -> torch.Tensor:
    """[B, T] positions of a batch: its position_ids (restarting per document), else 0..T-1."""
    ids = batch["input_ids"]
    return row_positions(batch.get("position_ids"), ids.shape, ids.device)


def batch_documents(batch: dict) -> torch.Tensor:
    """[B, T] document ids of a batch (models/documents.py)."""
    return document_ids(batch_positions(batch))
