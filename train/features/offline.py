"""`OfflineFeatures`: features read back from an `extract`ed cache by training row, the logits
computed from the stored last layer."""

from __future__ import annotations

import bisect
import collections
import pathlib

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.train.features.cache import (
    CACHE_DTYPES,
    MANIFEST,
    _opened,
    _read_json,
    _refuse_different,
    comparable,
    settings,
)
from draftsmith.train.features.online import Features, check_layers, num_hidden_states, row_index

OPEN_SHARDS = 4  # safe_open handles kept: a shuffled epoch hops between shards


class OfflineFeatures:
    """Features read back from an `extract`ed cache, by training row (batch["row"], indices into
    the TRAIN split: held-out batches have no cached features and go through OnlineFeatures)."""

    def __init__(self, cache_dir, target, layers, max_length: int, train_rows):
        self.dir, self.target, self.layers = pathlib.Path(cache_dir), target, tuple(layers)
        n_states = num_hidden_states(target.config)
        check_layers(self.layers, n_states, target.name)
        if not (self.dir / MANIFEST).is_file():
            raise DraftsmithError(
                f"feature cache {self.dir} has no {MANIFEST} (not extracted, or the extraction did "
                f"not finish): run python -m draftsmith.train.features RECIPE --output {self.dir}"
            )
        manifest = _read_json(self.dir / MANIFEST)
        want = settings(target, self.layers, max_length, train_rows, manifest.get("dtype", "bfloat16"))
        _refuse_different(
            self.dir,
            manifest,
            comparable(manifest, want),
            "re-extract it for this run with python -m draftsmith.train.features RECIPE --output DIR (a new folder)",
        )
        try:
            self.shards = [(s["rows"][0], s["rows"][1], self.dir / s["file"]) for s in manifest["shards"]]
            self.dtype = CACHE_DTYPES[manifest["dtype"]]
        except (KeyError, TypeError, IndexError):
            raise DraftsmithError(
                f"{self.dir / MANIFEST}: corrupt (no valid shards/dtype); delete {self.dir} and re-extract"
            ) from None
        self.shards.sort()
        self.starts = [lo for lo, _, _ in self.shards]
        for _, _, path in self.shards:
            if not path.is_file():
                raise DraftsmithError(
                    f"feature cache {self.dir}: {path.name} is missing; rerun the extraction to rewrite it"
                )
        self.width = len(self.layers) * want["hidden_size"]
        # Logits need the LM head's input, the last layer after the final norm: index n_states - 1.
        self.last = next((j for j, layer in enumerate(self.layers) if layer % n_states == n_states - 1), None)
        self.open: collections.OrderedDict = collections.OrderedDict()

    def __call__(self, batch: dict, want_logits: bool = False, logit_rows=None) -> Features:
        if want_logits and self.last is None:
            raise DraftsmithError(
                f"feature cache {self.dir} holds layers {list(self.layers)}, not the last layer (-1) "
                f"the logits are computed from: extract with -1 among the layers, or use online features"
            )
        rows, lengths = batch["row"].tolist(), batch["attention_mask"].sum(dim=1).tolist()
        hidden = torch.zeros(len(rows), batch["input_ids"].shape[1], self.width, dtype=self.dtype)
        for b, (row, length) in enumerate(zip(rows, lengths)):
            stored = self._row(row)
            if tuple(stored.shape) != (length, self.width):
                raise DraftsmithError(
                    f"feature cache {self.dir}: row {row} holds {tuple(stored.shape)}, the batch needs "
                    f"({length}, {self.width}): is batch['row'] an index into the training split?"
                )
            hidden[b, :length] = stored
        hidden = hidden.to(device=self.target.device, dtype=self.target.dtype)
        logits = None
        if want_logits:
            d = self.width // len(self.layers)
            with torch.no_grad():
                head = self.target.model.get_output_embeddings()
                last = hidden[..., self.last * d : (self.last + 1) * d]
                logits = head(last if logit_rows is None else last[logit_rows])
                cap = getattr(self.target.config.get_text_config(), "final_logit_softcapping", None)
                if cap:  # Gemma-2/3 squash logits after the head; the model's forward would too
                    logits = torch.tanh(logits / cap) * cap
        return Features(hidden, logits, None if logit_rows is None else row_index(logit_rows))

    def _row(self, row: int) -> torch.Tensor:
        k = bisect.bisect_right(self.starts, row) - 1
        if k < 0 or row >= self.shards[k][1]:
            raise DraftsmithError(
                f"feature cache {self.dir} has no row {row} (it holds {self.shards[-1][1]} training rows)"
            )
        f = self.open.pop(k, None)
        f = _opened(self.shards[k][2]) if f is None else f
        self.open[k] = f  # most recently used last
        if len(self.open) > OPEN_SHARDS:
            self.open.popitem(last=False)
        try:
            return f.get_tensor(f"row.{row}")
        except Exception as e:  # noqa: BLE001 -- a missing key or a truncated file
            raise DraftsmithError(
                f"{self.shards[k][2]}: cannot read row {row} ({type(e).__name__}: {str(e)[:200]}); "
                f"delete the shard and rerun the extraction to rewrite it"
            ) from None
