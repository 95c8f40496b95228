"""Training recipes: typed dataclasses, YAML instances, dotted command-line overrides.

A recipe (`configs/<target>/<drafter>.yaml`) is one `Recipe`: six sections, each a dataclass
(train/recipe.py), each numeric knob bounded on its annotation (train/recipe_bounds.py). This
module loads one, and every name of those two modules stays importable from here. Loading is
strict: an unknown or mistyped key, a wrong type or a bad value is a DraftsmithError that names
the key (with a "did you mean" when one is close), before any model loads. `json_schema()`
(`python -m draftsmith.train.config`) is the schema for editors.

Why not pydantic for the loading itself: its lax mode turns `true` into 1, 5.0 into 5 and "yes"
into True, and its strict mode refuses "3e-4" (YAML 1.1 reads it as a string), a number where a
string goes and a single value where a list goes, all of which a recipe allows. Matching our rules
takes a validator per type plus a translation of its errors into one line with "did you mean", more
code than the converter below; so pydantic only writes the schema, from the same annotations.

    recipe = load_recipe("configs/tiny/draft_lm.yaml", ["--optim.lr=3e-4", "--data.max_length", "256"])
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import types
import typing

import yaml

from draftsmith.errors import DraftsmithError
from draftsmith.train.recipe import (  # noqa: F401 (importable from here)
    _CHOICES,
    DEFAULT_KIND,
    DEFAULT_MAX_STEPS,
    DIVERGENCES,
    CheckpointConfig,
    DataConfig,
    LoggingConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    Recipe,
    Seed,
    choices,
    divergence_checks,
    take_old_loss_key,
)
from draftsmith.train.recipe_bounds import (  # noqa: F401 (importable from here)
    Note,
    _join,
    check_ranges,
    numeric_fields,
    range_spec,
    ranges,
)


def __getattr__(name: str):
    if name == "CHOICES":
        return choices()
    raise AttributeError(f"module 'draftsmith.train.config' has no attribute {name!r}")


# --- building dataclasses from plain dicts, strictly ------------------------------------------


def _build(cls, data, where: str):
    if not isinstance(data, dict):
        raise DraftsmithError(f"{where or 'recipe'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{_join(where, close[0])}'?)" if close else f"; valid keys: {', '.join(names)}"
            raise DraftsmithError(f"unknown config key '{_join(where, key)}'{hint}")
    kwargs = {}
    for name in names:
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], _join(where, name))
    return cls(**kwargs)


def _convert(value, hint, where: str):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, args[0], where)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is typing.Any:
        return value
    if hint is dict and isinstance(value, dict):
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):
                raise DraftsmithError(f"config key '{where}': expected a finite number, got {value!r}")
            return number
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, bool) and ("no" if value is False else "yes") in _CHOICES.get(where, ()):
            return "no" if value is False else "yes"  # YAML 1.1 reads a bare `no` (`yes`) as a bool
    if value is None:
        raise DraftsmithError(f"config key '{where}' must not be null")
    raise DraftsmithError(f"config key '{where}': expected {getattr(hint, '__name__', hint)}, got {value!r}")


def recipe_from_dict(data: dict, *, drafter_configs: dict[str, type] | None = None) -> Recipe:
    """A recipe from its sections; `drafter.kind` picks its dataclass from the kind registry
    (draftsmith/kinds.py), or from `drafter_configs` (kind -> dataclass) where one is given."""
    from draftsmith.kinds import KINDS, Kind

    data = dict(data or {})
    drafter = dict(data.pop("drafter", None) or {})
    kind = drafter.get("kind", DEFAULT_KIND)
    if drafter_configs is None:
        trainable = [k.name for k in KINDS.values() if k.config_ref is not None]
        drafter_configs = {kind: KINDS[kind].config} if kind in trainable else dict.fromkeys(trainable)
    if kind not in drafter_configs:
        raise DraftsmithError(
            f"config key 'drafter.kind': unknown drafter {kind!r}; trainable kinds: {', '.join(drafter_configs)}"
        )
    recipe = _build(Recipe, {**data, "drafter": None}, "")  # the sections first, as they are listed
    recipe.drafter = _build(drafter_configs[kind], drafter, "drafter")
    for key, allowed in choices([type(recipe.drafter)]).items():
        section, name = key.split(".")
        obj = getattr(recipe, section)
        if hasattr(obj, name) and getattr(obj, name) not in allowed:
            raise DraftsmithError(f"config key '{key}': {getattr(obj, name)!r} is not one of {', '.join(allowed)}")
    _check_values(recipe)
    if recipe.logging.acceptance_k is None:  # one default K per kind: training measures what eval and bench run
        entry = KINDS.get(kind)
        recipe.logging.acceptance_k = entry.default_k if entry else Kind.__dataclass_fields__["default_k"].default
    return recipe


def resolve_data_source(r: Recipe) -> None:
    """data.source against the older knobs that say the same (data.regenerate, the draft LM's
    drafter.on_policy_fraction): one meaning whichever is written, or one clear error."""
    d, fraction = r.data, getattr(r.drafter, "on_policy_fraction", None)
    if d.source == "regenerated":
        d.regenerate = True
    elif d.source == "corpus" and d.regenerate:
        d.source = "regenerated"
    if d.source == "on_policy":
        if fraction is None:
            raise DraftsmithError(
                f"data.source on_policy samples from the drafter, which the draft LM can do (drafter.kind draft_lm); "
                f"a {r.drafter.kind} drafter trains on corpus or regenerated data"
            )
        if fraction == 0:
            r.drafter.on_policy_fraction = 1.0
    elif fraction:  # on_policy_fraction alone, as recipes wrote it before data.source
        d.source = "on_policy"


def _check_values(r: Recipe) -> None:
    resolve_data_source(r)
    if r.optim.max_steps is None and r.optim.epochs is None:  # the trainer derives them from epochs
        r.optim.max_steps = DEFAULT_MAX_STEPS
    check_ranges(r)
    checks = [
        (len(r.optim.betas) == 2, "optim.betas must be two numbers"),
        (set(r.logging.trackers) <= {"tensorboard", "wandb"}, "logging.trackers: choose from tensorboard, wandb"),
        *r.data.endpoint_checks(),
        *r.model.checks(r),
    ]
    if hasattr(r.drafter, "checks"):
        checks += r.drafter.checks()
    for ok, msg in checks:
        if not ok:
            raise DraftsmithError(msg)


def json_schema() -> dict:
    """The recipe's JSON Schema, for editors (a YAML language server checks and completes a recipe
    with it): every key's type, default and bounds, the string knobs' choices (a free-text knob takes
    a number too, as the loader does), unknown keys refused, and `drafter` as one of the kinds'
    dataclasses. `python -m draftsmith.train.config` prints it.
    pydantic writes it from the same annotations the loader checks."""
    import pydantic

    from draftsmith.kinds import drafter_configs

    kinds = drafter_configs()
    schema = pydantic.TypeAdapter(Recipe).json_schema()
    drafter = pydantic.TypeAdapter(typing.Union[tuple(kinds.values())]).json_schema()  # noqa: UP007
    defs = {**schema.pop("$defs", {}), **drafter.pop("$defs", {})}
    schema["properties"]["drafter"] = drafter
    sections = [(name, hint) for name, hint in typing.get_type_hints(Recipe).items() if name != "drafter"]
    sections += [("drafter", cls) for cls in kinds.values()]
    sections += [("drafter.lora", LoraConfig)]
    for kind, cls in kinds.items():
        defs[cls.__name__]["properties"]["kind"]["const"] = kind
    table = choices(kinds.values())
    for prefix, cls in sections:
        for name, prop in defs[cls.__name__]["properties"].items():
            string = next((p for p in prop.get("anyOf", [prop]) if p.get("type") == "string"), None)
            if string is not None and "const" not in string:  # a string knob: its choices, or any text
                allowed = table.get(f"{prefix}.{name}")
                string.update({"enum": list(allowed)} if allowed else {"type": ["string", "number"]})
    for d in [schema, *defs.values()]:
        d["additionalProperties"] = False
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "$defs": defs}


# --- YAML + overrides --------------------------------------------------------------------------


def parse_overrides(args: list[str]) -> dict[str, object]:
    """`--optim.lr=3e-4` or `--optim.lr 3e-4` -> {"optim.lr": 0.0003} (values parsed as YAML)."""
    out, i = {}, 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
            raise DraftsmithError(f"unexpected argument {arg!r}: overrides look like --section.key=value")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise DraftsmithError(f"override --{key} has no value")
            value = args[i + 1]
            i += 1
        out[key] = yaml.safe_load(value) if value != "" else ""
        i += 1
    return out


def apply_overrides(data: dict, overrides: dict[str, object]) -> dict:
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise DraftsmithError(f"override --{dotted}: '{p}' is not a section")
            node = child
        node[leaf] = value
    return data


def load_recipe(
    path: str | pathlib.Path,
    overrides: list[str] | dict | None = None,
    *,
    drafter_configs: dict[str, type] | None = None,
) -> Recipe:
    """A YAML recipe with dotted overrides (`--section.key=value`); unknown keys are errors."""
    path = pathlib.Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.yaml"))[:5]
        raise DraftsmithError(
            f"recipe {path} is a directory, not a YAML file"
            + (f": pass one of its recipes ({', '.join(inside)})" if inside else "")
        )
    if not path.is_file():
        raise DraftsmithError(f"recipe {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise DraftsmithError(f"recipe {path} is not valid YAML: {_yaml_problem(e)}") from None
    except UnicodeDecodeError:
        raise DraftsmithError(f"recipe {path} is not a text file (not UTF-8): pass a YAML recipe") from None
    except OSError as e:
        raise DraftsmithError(f"recipe {path} could not be read: {e.strerror or e}") from None
    if data is None:  # an empty file, or only comments: refuse rather than train every default
        raise DraftsmithError(
            f"recipe {path} is empty: write a recipe (model, drafter, data, optim sections) "
            "or start from one in configs/, e.g. configs/tiny/draft_lm.yaml"
        )
    if not isinstance(data, dict):
        raise DraftsmithError(f"recipe {path}: expected a mapping of sections at the top level")
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    return recipe_from_dict(apply_overrides(data, overrides or {}), drafter_configs=drafter_configs)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: what it was parsing where, and what went wrong where."""

    def at(text, mark):
        return f"{text} (line {mark.line + 1}, column {mark.column + 1})" if text and mark else text

    parts = [
        at(getattr(e, "context", None), getattr(e, "context_mark", None)),
        at(getattr(e, "problem", None), getattr(e, "problem_mark", None)),
    ]
    return ": ".join(p for p in parts if p) or str(e).splitlines()[0]


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False)


if __name__ == "__main__":  # python -m draftsmith.train.config > recipe.schema.json
    import json

    from draftsmith.train import config  # the package's module, the one the kinds' task files import

    print(json.dumps(config.json_schema(), indent=2))
