"""Rows that hold several documents (conversations) side by side, each on its own.

A packed training row carries `position_ids` that restart at 0 at every document
(train/data/packing.py). The document a token belongs to follows from them by transformers' own
rule (masking_utils.find_packed_sequence_indices): a new document starts wherever a position
does not follow its predecessor's by one. Everything that reads a row attends and predicts
within one document only: what serving sees, one conversation at a time.
"""

from __future__ import annotations

import torch


def row_positions(position_ids: torch.Tensor | None, shape, device) -> torch.Tensor:
    """[B, T] long positions: the given ones, or 0..T-1 in every row (one document a row)."""
    if position_ids is not None:
        return position_ids.long()
    B, T = shape
    return torch.arange(T, device=device).expand(B, T)


def document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """[B, T] positions -> [B, T] long: equal numbers for the tokens of one document, counted from
    0 in each row (a document starts where a position is not its predecessor's + 1)."""
    first = position_ids[:, :1] - 1
    return (torch.diff(position_ids, prepend=first, dim=-1) != 1).long().cumsum(-1)


def same_document(doc: torch.Tensor) -> torch.Tensor:
    """[B, T] document ids -> [B, 1, T, T] bool: query t may see key s of its own document."""
    return (doc[:, :, None] == doc[:, None, :]).unsqueeze(1)


def forward_documents(model, input_ids: torch.Tensor, position_ids: torch.Tensor, rows_kept: bool = False, **kwargs):
    """`model(...)` (a transformers causal LM) over rows of documents that never see each other.

    With no attention mask and position ids that restart per document, transformers builds the
    block-diagonal causal mask itself for sdpa and eager (masking_utils: create_causal_mask,
    find_packed_sequence_indices); right padding needs no mask (no real token follows it). Flash
    attention reads documents from position ids for a batch of one row only
    (modeling_flash_attention_utils._is_packed_sequence): the rows are laid end to end as one,
    and the outputs cut back into rows (logits too, unless `rows_kept`: a head that computes
    chosen rows only, train/losses.py head_on_rows, returns [1, N, V] either way)."""
    inner = getattr(model, "module", model)  # under DDP, the wrapped model's config
    impl = str(getattr(getattr(inner, "config", None), "_attn_implementation", "") or "")
    B, T = input_ids.shape
    if "flash" not in impl or B == 1:
        return model(input_ids=input_ids, position_ids=position_ids, attention_mask=None, **kwargs)
    out = model(input_ids=input_ids.reshape(1, B * T), position_ids=position_ids.reshape(1, B * T), **kwargs)
    if getattr(out, "hidden_states", None) is not None:
        out.hidden_states = tuple(h.view(B, T, *h.shape[2:]) for h in out.hidden_states)
    logits = getattr(out, "logits", None)
    if logits is not None and not rows_kept and logits.shape[1] == B * T:
        out.logits = logits.view(B, T, *logits.shape[2:])
    return out


__all__ = ["document_ids", "forward_documents", "row_positions", "same_document"]
