"""Features computed by the frozen target in the training process, every step: its hidden
states at the drafter's layers (and, when asked, its logits), and the checks on the layer indices."""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.models.documents import forward_documents
from draftsmith.train.data.rows import batch_positions
from draftsmith.train.losses import head_on_rows


@dataclass
class Features:
    hidden: torch.Tensor  # [B, T, len(layers) * d], target dtype, the layers in the order asked for
    logits: torch.Tensor | None = None  # [B, T, V], target dtype, when asked for; [N, V] with logit_rows
    logit_index: torch.Tensor | None = None  # with logit_rows: [B, T] long, (b, t) -> its row of logits (-1: none)


def row_index(rows: torch.Tensor) -> torch.Tensor:
    """[B, T] bool -> [B, T] long: the index of each selected position among the selected, -1 elsewhere."""
    return torch.where(rows, rows.flatten().cumsum(0).view(rows.shape) - 1, -1)


def num_hidden_states(config) -> int:
    return config.get_text_config().num_hidden_layers + 1  # embeddings + one per decoder layer


def check_distinct_layers(layers, n_states: int) -> None:
    """Each hidden state once: an index listed twice, or a negative one naming a listed state,
    would store the same features twice under two places of the drafter's input."""
    seen = {}
    for layer in layers:
        state = layer % n_states
        if state in seen:
            same = "" if seen[state] == layer else f" ({seen[state]} and {layer} are both hidden state {state})"
            raise DraftsmithError(f"--layers lists hidden state {layer} twice{same}: give each index once")
        seen[state] = layer


def check_layers(layers, n_states: int, name: str) -> None:
    if not layers:
        raise DraftsmithError("the drafter reads no hidden layers: give at least one index")
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n_states <= layer < n_states:
            raise DraftsmithError(
                f"the drafter reads hidden layer {layer} but {name} has {n_states} hidden "
                f"states (indices {-n_states}..{n_states - 1})"
            )


# no_grad, not inference_mode: the features feed a drafter whose forward autograd records, and
# inference tensors cannot be saved for backward.
@torch.no_grad()
def target_hidden_states(
    target_model, input_ids, attention_mask, layers, want_logits=False, name=None, logit_rows=None, position_ids=None
) -> Features:
    """Entries `layers` of transformers' `hidden_states` tuple (0: embeddings, i: the input of
    decoder layer i, -1: the last layer after the final norm = the LM head's input), concatenated.
    logit_rows ([B, T] bool): the LM head runs on those positions only (logits [N, V]).
    position_ids ([B, T], restarting at each conversation of a packed row): each conversation's
    features are computed as if it were alone (models/documents.py); rows are right-padded, so
    the attention mask is then not needed."""
    extra = {}
    if not want_logits and "logits_to_keep" in inspect.signature(target_model.forward).parameters:
        extra["logits_to_keep"] = 1  # skip the [B, T, V] LM head nobody reads
    rows = (
        head_on_rows(target_model, logit_rows) if want_logits and logit_rows is not None else contextlib.nullcontext()
    )
    with rows:
        if position_ids is None:
            out = target_model(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False, **extra
            )
        else:
            out = forward_documents(
                target_model,
                input_ids,
                position_ids,
                rows_kept=logit_rows is not None,
                output_hidden_states=True,
                use_cache=False,
                **extra,
            )
    states = out.hidden_states
    check_layers(tuple(layers), len(states), name or target_model.config.name_or_path)
    hidden = torch.cat([states[i] for i in layers], dim=-1)
    if not want_logits:
        return Features(hidden)
    if logit_rows is None:
        return Features(hidden, out.logits)
    return Features(hidden, out.logits[0], row_index(logit_rows))


class OnlineFeatures:
    """Features computed by the target in the training process, every step."""

    def __init__(self, target, layers: tuple[int, ...]):
        self.target, self.layers = target, tuple(layers)
        check_layers(self.layers, num_hidden_states(target.config), target.name)

    def __call__(self, batch: dict, want_logits: bool = False, logit_rows=None) -> Features:
        return target_hidden_states(
            self.target.model,
            batch["input_ids"],
            batch["attention_mask"],
            self.layers,
            want_logits,
            name=self.target.name,
            logit_rows=logit_rows,
            position_ids=batch_positions(batch),
        )
