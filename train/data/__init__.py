"""Training data for drafters: load, filter, hold out, (optionally) regenerate, tokenise, pack.

    rows, fmt = load_rows(cfg)         chitchat | sharegpt | stdlib | local .json/.jsonl/.parquet | hub id
    -> filter (counted, logged)        empty, no assistant turn, a turn over max_turn_chars
    -> regenerate (optional)           assistant turns rewritten by the target (train/data/regeneration.py)
    -> held-out split (seeded)         eval rows + eval prompts for real acceptance measurement
    -> render + tokenise               chat template; loss mask on assistant tokens only
    -> pack or pad                     fixed [N, max_length] int tensors

Every row that is dropped is counted in `TrainData.stats` and in one INFO log line.

One module per step: `loading.py` (the datasets and files), `filtering.py` (usable rows, the
held-out split), `tokenizing.py` (chat template, loss mask), `packing.py` (fixed-length rows),
`held_out.py` (the acceptance prompts), `rows.py` (the row tensors and their collation) and
`build.py` (`build_data`, the pipeline); the built-in corpora are in `corpora.py`, regeneration
by the target in `regeneration.py` and `regenerated_file.py`. This package face only re-exports.
"""

from __future__ import annotations

from draftsmith.train.data import corpora, regenerated_file
from draftsmith.train.data.build import build_data
from draftsmith.train.data.held_out import CODE_CORPORA, MAX_EVAL_PROMPTS, TEXT_PROMPT_TOKENS, mix_domains
from draftsmith.train.data.loading import LOCAL_SUFFIXES, load_rows
from draftsmith.train.data.rows import TokenRows, TrainData, collate
from draftsmith.train.data.tokenizing import TOKENIZE_CHUNK

__all__ = [
    "CODE_CORPORA",
    "LOCAL_SUFFIXES",
    "MAX_EVAL_PROMPTS",
    "TEXT_PROMPT_TOKENS",
    "TOKENIZE_CHUNK",
    "TokenRows",
    "TrainData",
    "build_data",
    "collate",
    "corpora",
    "load_rows",
    "mix_domains",
    "regenerated_file",
]
