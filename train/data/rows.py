"""The training rows as the trainer takes them: fixed-length token tensors, and the batch collation."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from draftsmith.evaluation.prompts import Prompt


@dataclass
class TrainData:
    train: torch.utils.data.Dataset
    eval: torch.utils.data.Dataset
    eval_prompts: list[Prompt]
    stats: dict[str, int] = field(default_factory=dict)


class TokenRows(torch.utils.data.Dataset):
    """Fixed-length rows kept as three [N, L] tensors (int32 ids, uint8 masks), not Python lists.
    `loss_mask[t] = 1` marks token t as a training target (predicted from the tokens before it).
    Items also carry their index, "row": the key of a row's cached target features."""

    def __init__(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, attention_mask: torch.Tensor):
        self.input_ids, self.loss_mask, self.attention_mask = input_ids, loss_mask, attention_mask

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {k: getattr(self, k)[i].long() for k in ("input_ids", "loss_mask", "attention_mask")}
        return item | {"row": torch.tensor(int(i))}


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    """Stack equal-length items into [B, L] tensors (rows are already max_length)."""
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}
