"""Deprecated home of the kind registry and the loaders (kept for one release).

The registry moved to the bottom of the package (`draftsmith.kinds`: lazy references, loads
nothing), `load_drafter` back to `draftsmith.models`, `load_recipe` and `recipe_from_dict` to
`draftsmith.train.config`. The names below still work from here, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings

_MOVED = {
    "KINDS": "draftsmith.kinds",
    "Kind": "draftsmith.kinds",
    "get_kind": "draftsmith.kinds",
    "load_drafter": "draftsmith.models",
    "load_recipe": "draftsmith.train.config",
    "recipe_from_dict": "draftsmith.train.config",
}


def __getattr__(name: str):
    if name == "DRAFTER_CONFIGS":
        warnings.warn(
            "draftsmith.train.kinds.DRAFTER_CONFIGS is deprecated: use draftsmith.kinds.drafter_configs()",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("draftsmith.kinds").drafter_configs()
    if name == "TASKS":
        warnings.warn(
            "draftsmith.train.kinds.TASKS is deprecated: use draftsmith.kinds.KINDS[kind].task",
            DeprecationWarning,
            stacklevel=2,
        )
        kinds = importlib.import_module("draftsmith.kinds").KINDS
        return {k.name: k.task for k in kinds.values() if k.trainable}
    if name in _MOVED:
        warnings.warn(
            f"draftsmith.train.kinds.{name} is deprecated: import it from {_MOVED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'draftsmith.train.kinds' has no attribute {name!r}")
