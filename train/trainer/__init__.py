"""The trainer and its parts: the accelerate loop (loop.py), atomic checkpoints (checkpoint.py), the
data order and learning-rate schedule (schedule.py), fault handling and the heartbeat (faults.py),
training curves (curves.py) and the FLOP model (flops.py).

`draftsmith.train.trainer.<name>` (the loop's names, from before the loop had its own module) still
resolves, with a DeprecationWarning: import them from `draftsmith.train.trainer.loop`."""

import importlib
import warnings

_PARTS = ("loop", "checkpoint", "schedule", "faults", "curves", "flops")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _PARTS:  # `from draftsmith.train.trainer import faults` before it loaded
        return importlib.import_module(f"{__name__}.{name}")
    loop = importlib.import_module("draftsmith.train.trainer.loop")
    if not hasattr(loop, name):
        raise AttributeError(f"module 'draftsmith.train.trainer' has no attribute {name!r}")
    warnings.warn(
        f"draftsmith.train.trainer.{name} is deprecated: import it from draftsmith.train.trainer.loop",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(loop, name)
