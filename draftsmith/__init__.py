"""draftsmith: train speculative-decoding drafters and measure their speedup end to end.

The documented Python API (docs/python-api.md)::

    from draftsmith import Target, load_drafter, Engine, SamplingConfig
    target = Target.load("smollm2-135m-instruct")
    drafter = load_drafter("runs/eagle3/final", target)
    result = Engine(target, drafter).generate(ids, 64)  # K: the drafter's kind's default_k
    result.metrics.mean_acceptance_length
    summary = draftsmith.train(draftsmith.load_recipe("configs/tiny/draft_lm.yaml"))
    draftsmith.export.export(summary["final_checkpoint"], "vllm", "out/draft-vllm")

Every name below is resolved on first use (PEP 562), so `import draftsmith` loads no torch,
transformers or datasets: the CLI builds its parser and answers --help at once, and a notebook
pays for the runtime only when it touches it. The table maps each public name to the module
that defines it, as strings: the layering test reads import statements as edges, and this
package's top would otherwise import every layer below it.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> module that defines it. Moving a name = changing its module here; the name stays.
_API: dict[str, str] = {
    # the target and the drafters
    "Target": "draftsmith.models",
    "load_drafter": "draftsmith.models",
    "Checkpoint": "draftsmith.models",
    # the runtime
    "Engine": "draftsmith.infer",
    "GenerationResult": "draftsmith.infer",
    "SamplingConfig": "draftsmith.infer",
    "GREEDY": "draftsmith.infer",
    "TreeConfig": "draftsmith.infer.tree",
    # the metrics (named as vLLM names them) and the speed model
    "SpecMetrics": "draftsmith.infer.metrics",
    "predicted_speedup": "draftsmith.infer",
    # training
    "load_recipe": "draftsmith.train.config",
    "Recipe": "draftsmith.train.config",
    # the kinds. `train` and `export` are not in this table: they are subpackages, which Python binds
    # on this package whenever they load, so a function of the same name here could not stay put.
    # `train` (the package) is callable as train(recipe); `export.export(...)` writes an export.
    "KINDS": "draftsmith.kinds",
    # errors every call above may raise: one line naming the problem and the fix
    "DraftsmithError": "draftsmith.errors",
}

# the documented subpackages: `draftsmith.train(recipe)`, `draftsmith.export.export(...)`
_PACKAGES = {"train": "draftsmith.train", "export": "draftsmith.shipping.export"}

__all__ = sorted([*_API, "export", "train"])


def __getattr__(name: str):
    module = _API.get(name)
    if name in _PACKAGES:  # `from draftsmith import train` before the subpackage has loaded
        return importlib.import_module(_PACKAGES[name])
    if module is None:
        raise AttributeError(f"module 'draftsmith' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once; later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
