"""The frozen target's hidden states ("features") that EAGLE drafters read, online or from a cache.

Online (the default): the target runs under no_grad in the training process, every step
(`online.py`: `OnlineFeatures`, `target_hidden_states`).
Offline: `extract` (`extraction.py`) runs it once over the training split and writes a cache
(`cache.py`: its files and settings) that training reads back (`offline.py`: `OfflineFeatures`), so
the target's forward is paid once however many epochs follow. `vllm.py` writes the same cache from
vLLM's hidden states; `cli.py` is the `features` command. This package face only re-exports.

    accelerate launch -m draftsmith.train.features RECIPE --output DIR [--shard-rows N] [--a.b=value ...]
"""

from __future__ import annotations

from draftsmith.train.features.cache import (
    CACHE_DTYPES,
    CACHE_ENTRIES,
    FORMAT,
    MANIFEST,
    SETTINGS,
    check_cache_folder,
    comparable,
    dataset_fingerprint,
    settings,
)
from draftsmith.train.features.extraction import extract
from draftsmith.train.features.offline import OPEN_SHARDS, OfflineFeatures
from draftsmith.train.features.online import (
    Features,
    OnlineFeatures,
    check_distinct_layers,
    check_layers,
    num_hidden_states,
    row_index,
    target_hidden_states,
)

__all__ = [
    "CACHE_DTYPES",
    "CACHE_ENTRIES",
    "FORMAT",
    "MANIFEST",
    "OPEN_SHARDS",
    "SETTINGS",
    "Features",
    "OfflineFeatures",
    "OnlineFeatures",
    "check_cache_folder",
    "check_distinct_layers",
    "check_layers",
    "comparable",
    "dataset_fingerprint",
    "extract",
    "num_hidden_states",
    "row_index",
    "settings",
    "target_hidden_states",
]
