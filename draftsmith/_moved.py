"""Old module paths of this package, kept for one release.

The library is laid out by layer (evaluation/, shipping/, train/'s pipelines). A module that moved
stays importable under its old name: importing it returns the module itself (one object, so
classes and state are shared) and warns once with the new name. `python -m OLD.NAME` runs the moved
module too. The table is the only list of moves; remove an entry one release after it was added.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED: dict[str, str] = {
    "draftsmith.bench": "draftsmith.evaluation.bench",
    "draftsmith.prompts": "draftsmith.evaluation.prompts",
    "draftsmith.report": "draftsmith.evaluation.report",
    "draftsmith.export": "draftsmith.shipping.export",
    "draftsmith.engines": "draftsmith.shipping.engines",
    "draftsmith.hub": "draftsmith.shipping.hub",
    "draftsmith.crosscheck": "draftsmith.shipping.crosscheck",
    "draftsmith.train.corpora": "draftsmith.train.data.corpora",
    "draftsmith.train.regenerate": "draftsmith.train.data.regeneration",
    "draftsmith.train.features_cli": "draftsmith.train.features.cli",
    "draftsmith.train.vllm_features": "draftsmith.train.features.vllm",
    "draftsmith.train.checkpoint": "draftsmith.train.trainer.checkpoint",
    "draftsmith.train.faults": "draftsmith.train.trainer.faults",
    "draftsmith.train.curves": "draftsmith.train.trainer.curves",
    "draftsmith.train.flops": "draftsmith.train.trainer.flops",
    "draftsmith.train.task": "draftsmith.train.tasks.base",
    "draftsmith.train.draft_lm": "draftsmith.train.tasks.draft_lm",
    "draftsmith.train.medusa": "draftsmith.train.tasks.medusa",
    "draftsmith.train.eagle": "draftsmith.train.tasks.eagle",
    "draftsmith.train.pard": "draftsmith.train.tasks.pard",
    "draftsmith.train.dflash": "draftsmith.train.tasks.dflash",
}


def new_name(name: str) -> str | None:
    """The module's current name if `name` (or a package above it) moved, else None."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old name to the moved module (first on sys.meta_path: before the path finder
    could load a second copy of a moved submodule under its old package's name)."""

    def __init__(self):
        self._specs: dict = {}

    def find_spec(self, name, path=None, target=None):
        if new_name(name) is None:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        new = new_name(spec.name)
        warnings.warn(f"{spec.name} is deprecated: import {new}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__  # the import system sets __spec__ to the alias's: put it back
        return module

    def exec_module(self, module):
        # The module already ran under its new name; only its own spec is restored.
        module.__spec__ = self._specs.get(module.__name__, module.__spec__)

    def get_code(self, name):  # `python -m old.name` (runpy asks the loader for the code)
        new = new_name(name)
        spec = importlib.util.find_spec(new)
        if spec.submodule_search_locations is not None:  # a package: run its __main__
            spec = importlib.util.find_spec(new + ".__main__")
        return spec.loader.get_code(spec.name)

    def is_package(self, name):
        return importlib.util.find_spec(new_name(name)).submodule_search_locations is not None


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
