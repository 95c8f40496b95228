"""`load_drafter`: the command line's `--draft` value (or the Python API's) as a drafter.

truncated:N          the target's first N layers (draft_lm)
prompt_lookup[:N]    n-gram lookup in the context, n-grams up to N (default 3)
a checkpoint folder  written by the trainer (models/checkpoint.py): `drafter.json` names its
                     kind and its target; a run folder stands for its best/ or final/
anything else        a causal LM sharing the target's tokenizer (draft_lm): built-in name,
                     local folder, .gguf file or Hub id
"""

from __future__ import annotations

import os

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import KINDS

from .checkpoint import Checkpoint
from .draft_lm import DraftLM

SPECS = "a checkpoint folder, a model name, truncated:N or prompt_lookup[:N]"


def _check_target(target) -> None:
    """A Target (Target.load(name)), not its name: the drafter reads its model and tokenizer."""
    if target is None or isinstance(target, (str, os.PathLike)):
        raise DraftsmithError(
            f"load_drafter: the target must be a loaded Target (e.g. Target.load('tiny-random')), "
            f"got {type(target).__name__} {target!r}"
        )


def load_drafter(spec, target, flag: str = "target"):
    """`spec` (a `--draft` value, a path, or an opened Checkpoint) as a drafter for `target`. A
    checkpoint trained against another target loads with a warning naming both (`flag` names
    the target in it: "--target" on the command line)."""
    _check_target(target)
    if isinstance(spec, Checkpoint):
        return spec.load(target, flag)
    if not isinstance(spec, (str, os.PathLike)):
        raise DraftsmithError(f"load_drafter: name the drafter ({SPECS}), got {type(spec).__name__} {spec!r}")
    spec = os.fspath(spec)
    if not spec:
        raise DraftsmithError(f"load_drafter: the drafter's name is empty; pass {SPECS}")
    kind, _, arg = spec.partition(":")
    if kind == "truncated":
        if not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected truncated:N with N a number of layers")
        return DraftLM.truncated(target, int(arg))
    if kind in KINDS and not KINDS[kind].trainable:  # a kind without weights: the spec is the whole drafter
        return KINDS[kind].drafter.from_spec(spec)
    ckpt = Checkpoint.find(spec, "--draft")
    if ckpt is not None:
        return ckpt.load(target, flag)
    return DraftLM.from_pretrained(spec, target)


__all__ = ["load_drafter"]
