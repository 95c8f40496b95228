"""mkdocs hook: the pages' generated parts, filled from the code at build time so they cannot drift.

A page asks for a part with a marker on a line of its own:

    <!-- generated: config-reference -->   every recipe section and every kind's `drafter:` keys
    <!-- generated: recipes -->            every recipe under configs/ (target, kind, data, what it is)
    <!-- generated: kinds -->              every drafter kind: exports, engines crosscheck runs, paper

The config reference reads the dataclasses in train/recipe.py and each kind's dataclass from the
kind registry (draftsmith/kinds.py): names, types, defaults, ranges (each field's bounds), choices
(`CHOICES`) and the comment beside each field in the source.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import re
import typing

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
SECTIONS = ("model", "data", "optim", "checkpoint", "logging")  # Recipe's sections besides drafter


def on_config(config):
    """The generated pages read the code: without draftsmith installed the site cannot build."""
    try:
        import draftsmith.train.config  # noqa: F401
    except ImportError as e:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            f"docs/hooks.py builds the config reference from the code, and draftsmith does not import ({e}): "
            "pip install -e . (beside mkdocs mkdocs-material), then mkdocs serve"
        ) from None
    return config


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


# --- the config reference -------------------------------------------------------------------------


def _comments(cls) -> dict[str, str]:
    """field -> the `# comment` beside it in the class's source, or the comment lines right above it."""
    out, above = {}, []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        m = re.match(r"\s+(\w+): [^=#]+(?:=[^#]*)?(?:#\s*(.+))?$", line)
        if m and (m.group(2) or above):
            out[m.group(1)] = (m.group(2) or " ".join(above)).strip()
        above = []
    return out


def _type_name(hint) -> str:
    text = getattr(hint, "__name__", None) if not typing.get_args(hint) else None
    return text or str(hint).replace("typing.", "")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return "(section)"
    return (
        "`null`"
        if value is None
        else f"`{yaml.safe_dump(value, default_flow_style=True).strip()}`".replace("\n...", "")
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def section_table(cls, prefix: str) -> str:
    from draftsmith.train import config

    hints = typing.get_type_hints(cls)
    ranges = config.ranges(cls)
    notes = _comments(cls)
    rows = ["| key | type | default | allowed | what it does |", "|---|---|---|---|---|"]
    nested = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}"
        allowed = ", ".join(f"`{c}`" for c in config.CHOICES.get(key, ())) or ranges.get(f.name, "")
        if dataclasses.is_dataclass(hints[f.name]):
            nested.append((hints[f.name], key))
            allowed = "see below"
        rows.append(
            f"| `{key}` | {_cell(_type_name(hints[f.name]))} | {_cell(_default(f))} | {_cell(allowed)} "
            f"| {_cell(notes.get(f.name, ''))} |"
        )
    out = "\n".join(rows)
    for sub, key in nested:
        out += f"\n\n`{key}`:\n\n" + section_table(sub, key)
    return out


def config_reference() -> str:
    from draftsmith.kinds import KINDS
    from draftsmith.train.config import Recipe

    hints = typing.get_type_hints(Recipe)
    parts = []
    for name in SECTIONS:
        doc = inspect.getdoc(hints[name]) or ""
        parts.append(f"### `{name}`\n\n" + (doc + "\n\n" if doc and not doc.startswith(hints[name].__name__) else ""))
        parts[-1] += section_table(hints[name], name)
    for kind in KINDS.values():
        cls = kind.config
        if cls is None:
            continue
        doc = inspect.getdoc(cls) or ""
        parts.append(
            f"### `drafter` (kind `{kind.name}`)\n\n" + (doc + "\n\n" if doc else "") + section_table(cls, "drafter")
        )
    return "\n\n".join(parts)


# --- the recipes and the kinds ---------------------------------------------------------------------


def _first_comment(path: pathlib.Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("# ").strip()
        if not text or text.startswith(("draftsmith ", "accelerate ", "sbatch ", "python ")):
            break
        lines.append(text)
    text = re.split(r"(?<! al)\.\s+(?=[A-Z])", " ".join(lines))[0].rstrip(".:")  # first sentence; "et al." goes on
    return text if len(text) <= 160 else text[:160].rsplit(" ", 1)[0] + " …"


def recipes() -> str:
    rows = ["| recipe | target | kind | data | what it is |", "|---|---|---|---|---|"]
    for path in sorted((ROOT / "configs").glob("*/*.yaml")):
        if path.parent.name == "accelerate":
            continue
        data = yaml.safe_load(path.read_text()) or {}
        model, drafter, d = data.get("model") or {}, data.get("drafter") or {}, data.get("data") or {}
        rows.append(
            f"| `{path.relative_to(ROOT)}` | `{model.get('target', 'smollm2-135m-instruct')}` "
            f"| `{drafter.get('kind', 'draft_lm')}` | `{d.get('path', 'chitchat')}` | {_cell(_first_comment(path))} |"
        )
    return "\n".join(rows)


def kinds() -> str:
    from draftsmith.kinds import KINDS

    rows = ["| kind | trains | exports | cross-checked in | paper |", "|---|---|---|---|---|"]
    for k in KINDS.values():
        rows.append(
            f"| `{k.name}` | {'yes' if k.trainable else 'no (training-free)'} | {', '.join(k.exports) or '-'} "
            f"| {', '.join(k.crosscheck) or '-'} | {_cell(k.paper)} |"
        )
    return "\n".join(rows)


GENERATORS = {"config-reference": config_reference, "recipes": recipes, "kinds": kinds}
