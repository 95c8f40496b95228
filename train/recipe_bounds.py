"""Bounds on the recipe's numeric knobs, read from their annotations.

Every int/float knob carries its bounds on its own annotation, `typing.Annotated` with
annotated-types' `Ge`, `Gt` and `Interval` (the metadata pydantic reads too), and a `Note` where a
boundary value means something: `save_every: Annotated[int, Ge(0), Note("0: only at the end")]`.
`check_ranges` enforces them, the reference pages print them (`ranges`), and a test fails for a
numeric knob without bounds (`numeric_fields`). The public names stay importable from train/config.py.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass

from annotated_types import Ge, GroupedMetadata, Gt, Le, Lt

from draftsmith.errors import DraftsmithError


@dataclass(frozen=True)
class Note:
    """What a value at a bound means, shown after the range: `Annotated[int, Ge(0), Note("0: off")]`
    reads ">=0 (0: off)" in the reference and in the error. Alone it documents an unbounded knob."""

    text: str


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)


def check_ranges(obj, where: str = "") -> None:
    """Every field of `obj` and its nested sections against the bounds on its annotation (None
    passes: an optional knob left unset; a list is checked item by item)."""
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), _join(where, f.name)
        if dataclasses.is_dataclass(value):
            check_ranges(value, key)
            continue
        bounds = [m for m in _metadata(hints[f.name]) if type(m) in _WITHIN]
        if not bounds or value is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            if not all(_WITHIN[type(m)](v, m) for m in bounds):
                raise DraftsmithError(
                    f"config key '{key}' must be {_describe(range_spec(hints[f.name]))}, got {value!r}"
                )


_WITHIN = {Ge: lambda v, m: v >= m.ge, Gt: lambda v, m: v > m.gt, Le: lambda v, m: v <= m.le, Lt: lambda v, m: v < m.lt}


def _metadata(hint) -> list:
    """The metadata on `hint`'s Annotated leaf (through Optional and list), intervals split in two."""
    if typing.get_origin(hint) is typing.Annotated:
        return [m for meta in hint.__metadata__ for m in (meta if isinstance(meta, GroupedMetadata) else [meta])]
    return [m for arg in typing.get_args(hint) for m in _metadata(arg)]


def range_spec(hint) -> str | None:
    """A field's bounds as the reference pages write them: ">=1", ">0", "[0, 1)", ">=0 (0: off)";
    a Note alone (no bounds) is its text; None where the field has neither."""
    meta = _metadata(hint)
    low = [(">=", m.ge) for m in meta if isinstance(m, Ge)] + [(">", m.gt) for m in meta if isinstance(m, Gt)]
    high = [("<=", m.le) for m in meta if isinstance(m, Le)] + [("<", m.lt) for m in meta if isinstance(m, Lt)]
    notes = "; ".join(m.text for m in meta if isinstance(m, Note))
    if low and high:
        (lo_op, lo), (hi_op, hi) = low[0], high[0]
        bounds = f"{'[' if lo_op == '>=' else '('}{lo}, {hi}{']' if hi_op == '<=' else ')'}"
    else:
        bounds = "".join(map(str, (low or high or [("", "")])[0]))
    if bounds and notes:
        return f"{bounds} ({notes})"
    return bounds or notes or None


def ranges(cls) -> dict[str, str]:
    """field name -> its `range_spec`, for the fields of `cls` that declare one."""
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = {f.name: range_spec(hints[f.name]) for f in dataclasses.fields(cls)}
    return {name: spec for name, spec in specs.items() if spec}


def numeric_fields(cls) -> list[str]:
    """Names of `cls`'s int/float fields (optional or lists of numbers too): each declares its bounds."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in dataclasses.fields(cls) if _leaf_types(hints[f.name]) & {int, float}]


def _leaf_types(hint) -> set:
    if typing.get_origin(hint) in (typing.Union, types.UnionType, list):
        return set().union(*(_leaf_types(a) for a in typing.get_args(hint)))
    return {hint}


def _describe(spec: str) -> str:
    """ ">=0 (0: off)" -> ">= 0 (0: off)"; "(0, 1]" -> "in (0, 1]"."""
    bounds, paren, note = spec.partition(" (")
    for op in (">=", ">", "<=", "<"):
        if bounds.startswith(op):
            return f"{op} {bounds[len(op) :]}{paren}{note}"
    return f"in {bounds}{paren}{note}"
