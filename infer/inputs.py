"""The engine's arguments checked at its boundary: each refused in one line naming the argument,
the value and what is accepted, instead of a TypeError from deep in the decoding loop."""

from __future__ import annotations

import dataclasses
import numbers
import operator
from collections.abc import Mapping

import torch

from draftsmith.errors import DraftsmithError

from .proposal import Drafter
from .sampling import SamplingConfig
from .tree import TreeConfig

# "lossless": greedy verification at temperature 0, speculative sampling above (the output
# follows the target's distribution exactly). "typical-lossy": Medusa's typical acceptance,
# which changes the output distribution; its name says so and it is never a default.
VERIFICATIONS = ("lossless", "typical-lossy")


def validated_engine_args(target, drafter, k, tree, verification, adaptive):
    """Engine's arguments checked at the boundary, each refused in one line naming the argument,
    the value and what is accepted (instead of a TypeError from deep in the loop); -> (k as an
    int or None, tree as a TreeConfig or None). A mapping for `tree` builds TreeConfig(**mapping)."""
    if target is None or not callable(getattr(target, "forward_hidden", None)):
        raise DraftsmithError(
            f"Engine: target must be a loaded target (Target.load(name)), got {type(target).__name__} {target!r:.60}"
        )
    if drafter is not None and not isinstance(drafter, Drafter):
        raise DraftsmithError(
            f"Engine: drafter must be a loaded drafter (load_drafter(spec, target), or a subclass of "
            f"draftsmith.infer.Drafter) or None, got {type(drafter).__name__} {drafter!r:.60}"
        )
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise DraftsmithError(
                f"Engine: num_speculative_tokens must be an int >= 1 (or None: the drafter's default), "
                f"got {type(k).__name__} {k!r}"
            )
        k = int(k)
        if drafter is not None and k < 1:
            raise DraftsmithError(f"Engine: num_speculative_tokens must be >= 1 with a drafter, got {k}")
    if isinstance(tree, Mapping):
        try:
            tree = TreeConfig(**tree)
        except TypeError:
            fields = ", ".join(f.name for f in dataclasses.fields(TreeConfig))
            raise DraftsmithError(
                f"Engine: tree {dict(tree)!r} is not a TreeConfig: its keys must be among {fields}"
            ) from None
    elif tree is not None and not isinstance(tree, TreeConfig):
        raise DraftsmithError(
            f"Engine: tree must be a TreeConfig (or a mapping of its fields) or None, "
            f"got {type(tree).__name__} {tree!r}"
        )
    if not isinstance(verification, str):
        raise DraftsmithError(
            f"Engine: verification must be one of {', '.join(VERIFICATIONS)}, got {type(verification).__name__} "
            f"{verification!r}"
        )
    if not isinstance(adaptive, bool):
        raise DraftsmithError(f"Engine: adaptive must be True or False, got {type(adaptive).__name__} {adaptive!r}")
    return k, tree


def checked_seed(sampling, seed) -> int | None:
    """generate's sampling and seed, refused in one line before any work; -> the seed as an int
    (a numpy integer too), or None."""
    if not isinstance(sampling, SamplingConfig):
        hint = "SamplingConfig(**...)" if isinstance(sampling, Mapping) else "SamplingConfig(temperature=...)"
        raise DraftsmithError(
            f"generate: sampling must be a SamplingConfig (e.g. {hint}), got {type(sampling).__name__} {sampling!r}"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64):
        raise DraftsmithError(
            f"generate: seed must be an int in 0..2**64-1 (or None), got {type(seed).__name__} {seed!r}"
        )
    return None if seed is None else int(seed)


def prompt_tensor(prompt_ids, vocab_size: int | None, device) -> torch.Tensor:
    """A prompt as the [1, n] LongTensor the loop decodes, or one line naming what is wrong with
    it: text instead of ids, a wrong shape or dtype, an id outside the target's vocabulary."""
    usage = "a list of ints or a 1-D/1xN LongTensor; encode text with the target's tokenizer"
    if isinstance(prompt_ids, (str, bytes)):
        raise DraftsmithError(f"generate takes token ids ({usage}), not text")
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise DraftsmithError(f"generate takes token ids ({usage}), got a {prompt_ids.dtype} tensor")
        if prompt_ids.dim() > 2 or (prompt_ids.dim() == 2 and prompt_ids.shape[0] != 1):
            raise DraftsmithError(
                f"generate takes one prompt ({usage}), got a tensor of shape {list(prompt_ids.shape)}"
            )
        ids = prompt_ids.reshape(-1).tolist()
    else:
        try:
            ids = list(prompt_ids)
        except TypeError:
            raise DraftsmithError(f"generate takes token ids ({usage}), got {type(prompt_ids).__name__}") from None
        bad = [i for i in ids if isinstance(i, bool) or not hasattr(type(i), "__index__")]  # ints, numpy ints
        if bad:
            raise DraftsmithError(f"generate takes token ids ({usage}), got an element {bad[0]!r}")
        ids = [operator.index(i) for i in ids]
    if vocab_size:
        i = next((i for i, t in enumerate(ids) if not 0 <= t < vocab_size), None)
        if i is not None:
            raise DraftsmithError(
                f"prompt token id {ids[i]} (position {i}) is outside the target's vocabulary "
                f"of {vocab_size:,} ids (0..{vocab_size - 1})"
            )
    return torch.tensor(ids, dtype=torch.long, device=device).reshape(1, -1)


__all__ = ["VERIFICATIONS", "checked_seed", "prompt_tensor", "validated_engine_args"]
