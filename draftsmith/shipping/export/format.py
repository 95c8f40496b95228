"""One declaration per export format: the single place a format and its engine are named.

Each format module (hf.py, vllm.py, sglang.py, gguf.py) ends with one `Format`: its name, the
engine that serves it, its `write` and `check` functions, the engine `draftsmith crosscheck`
decodes it in (or None) and the engine install its writer needs (or None), its `--format` help,
what the model card says once an engine has decoded it, its own options (gguf's `--gguf-type`)
and its layout type (what a kind's `Kind.exports` entry for it is). `draftsmith export`,
`publish`, `crosscheck` and `draftsmith.shipping.engines` read their tables from these objects;
none of them lists format names.

Which kinds a format takes is said in one direction only: a kind's entry in draftsmith/kinds.py
(`Kind.exports`) names its formats and layouts. The registry (BUILTIN) is lazy, as kinds.py is:
"module:attr" strings, imported on first use, and the format modules import nothing heavy, so
`draftsmith --help` starts without torch. Adding a format is a module here, a line in BUILTIN
and the layouts the kinds' entries name.

The export package never imports the engines (draftsmith/shipping/engines): a format that needs
an engine's install says so in `requires`, and the engines side (publish, crosscheck, the engine
drivers) reads that declaration.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import get_kind, resolve

# The formats this package ships, in the order help texts and the model card list them.
BUILTIN = {
    "hf": "draftsmith.shipping.export.hf:FORMAT",
    "vllm": "draftsmith.shipping.export.vllm:FORMAT",
    "sglang": "draftsmith.shipping.export.sglang:FORMAT",
    "gguf": "draftsmith.shipping.export.gguf:FORMAT",
}


@dataclass(frozen=True)
class Option:
    """A format's own `draftsmith export` option, passed to its `write` as keyword `dest`."""

    flag: str
    dest: str
    choices: tuple[str, ...]
    default: str
    help: str


@dataclass(frozen=True)
class Format:
    """What one export format is, for every command that handles it.

    name:        `--format` value and the folder publish stages it in.
    engine:      the serving engine, as people name it ("vLLM").
    help:        `--format` help for it (the kinds it applies to are added from draftsmith/kinds.py).
    layout_type: the per-kind layout dataclass of this format (a kind's `Kind.exports[name]` is
                 one; a kind naming the format without a layout gets `layout_type()`).
    write:       (checkpoint, out, *, num_speculative_tokens, verifier, **options) -> notes for
                 draftsmith_export.json (`serve` at least); `checkpoint` is an opened
                 `draftsmith.models.Checkpoint`, `out` an empty folder.
    check:       (folder, kind) -> what the folder gets wrong against the contract ([] = nothing).
    checked_against: the engine version and source files the contract was read from.
    crosscheck:  the engine `draftsmith crosscheck` decodes this export in, or None; the engines
                 package (draftsmith/shipping/engines) holds that engine's driver.
    draft_first: the engine drafts the first new token too (llama.cpp): crosscheck compares it
                 with our runtime on that schedule.
    proven:      what the card adds after an engine decoded this export for the checkpoint.
    not_proven:  what the card says for a format no engine here decodes (crosscheck None).
    options:     this format's own export options.
    staged:      publish uploads it as a subfolder (hf: False, the checkpoint is the repo root).
    requires:    an engine install the writer runs (gguf: llama.cpp's converter); publish stages
                 the format only where it is installed, and says so on the card otherwise.
    requires_note: why there is none, when `requires` is missing.
    label:       the export as the card names it ("GGUF"); default the engine's name.
    serve_names_target: its serve line names the target (where a note on the target belongs).
    """

    name: str
    engine: str
    help: str
    layout_type: type
    write: Callable[..., dict]
    check: Callable[..., list[str]]
    checked_against: str
    crosscheck: str | None = None
    draft_first: bool = False
    proven: str = ""
    not_proven: str = ""
    options: tuple[Option, ...] = ()
    staged: bool = True
    requires: str | None = None
    requires_note: str = ""
    label: str = ""
    serve_names_target: bool = True

    def applies_to(self, kind: str) -> bool:
        return self.name in get_kind(kind).exports

    def layout(self, kind: str):
        """The kind's layout in this format (the format's empty layout where the kind declares
        the format without one: "hf" for a new kind is its checkpoint as it is)."""
        return get_kind(kind).layout(self.name) or self.layout_type()


def late(function: Callable) -> Callable:
    """`function`, looked up in its module at each call: what a format module hands its `Format`
    as `write`/`check`, so the module's function is the one that runs (a test may replace it)."""
    module, name = function.__module__, function.__name__

    @functools.wraps(function)
    def call(*args, **kwargs):
        return getattr(sys.modules[module], name)(*args, **kwargs)

    return call


def formats_of(kind: str) -> list[str]:
    """The formats a kind exports to: those its entry in draftsmith/kinds.py names."""
    return list(get_kind(kind).exports)


def kinds_of(fmt: str) -> tuple[str, ...]:
    """The kinds that export to format `fmt` (help texts read this, never a hand list)."""
    from draftsmith.kinds import KINDS

    return tuple(k for k in KINDS if get_format(fmt).applies_to(k))


def names() -> tuple[str, ...]:
    """Every export format's name, without importing any format module."""
    return tuple(BUILTIN)


def get_format(name: str) -> Format:
    """The Format called `name` (its module imported on first use)."""
    refs = BUILTIN
    if name not in refs:
        raise DraftsmithError(f"unknown export format {name!r}; formats: {', '.join(refs)}")
    fmt = resolve(refs[name])
    if not isinstance(fmt, Format) or fmt.name != name:
        raise DraftsmithError(f"{refs[name]} is not the Format {name!r} (a Format named {name!r} is expected)")
    return fmt


def formats() -> list[Format]:
    """Every export format, in registry order."""
    return [get_format(n) for n in names()]


__all__ = [
    "BUILTIN",
    "Format",
    "Option",
    "formats",
    "formats_of",
    "get_format",
    "kinds_of",
    "late",
    "names",
]
