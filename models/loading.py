"""Deprecated home of model loading (kept for one release).

Its four concerns live in their own modules: names, built-in targets and GGUF reassembly in
`draftsmith.models.sources`; the cache folder and its locks in `draftsmith.models.cache_folder`;
the tiny test model in `draftsmith.models.tiny_random`; drafter weight helpers in
`draftsmith.models.weights`; `first_line` in `draftsmith.fileio`. The names below still work
from here, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings

_MOVED = {
    "CACHE_ENV": ("draftsmith.models.cache_folder", "CACHE_ENV"),
    "MARKER": ("draftsmith.models.cache_folder", "MARKER"),
    "MARKER_FORMAT": ("draftsmith.models.cache_folder", "MARKER_FORMAT"),
    "cache_dir": ("draftsmith.models.cache_folder", "cache_dir"),
    "Builtin": ("draftsmith.models.sources", "Builtin"),
    "BUILTINS": ("draftsmith.models.sources", "BUILTINS"),
    "KNOWN_CONFIGS": ("draftsmith.models.sources", "KNOWN_CONFIGS"),
    "CONFIGS_DIR": ("draftsmith.models.sources", "CONFIGS_DIR"),
    "ModelSource": ("draftsmith.models.sources", "ModelSource"),
    "resolve_model": ("draftsmith.models.sources", "resolve_model"),
    "load_tokenizer": ("draftsmith.models.sources", "load_tokenizer"),
    "load_config": ("draftsmith.models.sources", "load_config"),
    "meta_causal_lm": ("draftsmith.models.sources", "meta_causal_lm"),
    "meta_build": ("draftsmith.models.sources", "meta_build"),
    "load_causal_lm": ("draftsmith.models.sources", "load_causal_lm"),
    "TINY_RECIPE": ("draftsmith.models.tiny_random", "TINY_RECIPE"),
    "TINY_SPECIALS": ("draftsmith.models.tiny_random", "TINY_SPECIALS"),
    "CHATML_TEMPLATE": ("draftsmith.models.tiny_random", "CHATML_TEMPLATE"),
    "check_same_tokenizer": ("draftsmith.models.sources", "check_same_tokenizer"),
    "load_draft_weights": ("draftsmith.models.weights", "load_draft_weights"),
    "require_config": ("draftsmith.models.sources", "require_config"),
    "check_draft_sizes": ("draftsmith.models.weights", "check_draft_sizes"),
    "register_config": ("draftsmith.models.weights", "register_config"),
    "first_line": ("draftsmith.fileio", "first_line"),
}


def __getattr__(name: str):
    if name in _MOVED:
        module, attr = _MOVED[name]
        warnings.warn(
            f"draftsmith.models.loading.{name} is deprecated: import {attr} from {module}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'draftsmith.models.loading' has no attribute {name!r}")
