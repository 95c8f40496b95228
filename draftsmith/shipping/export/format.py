"""One declaration per export format: the single place a format and its engine are named.

Each format module (hf.py, vllm.py, sglang.py, gguf.py) ends with one `Format`: its name, the
engine that serves it, the engine `draftsmith crosscheck` decodes it in (or None), its `--format`
help, what the model card says once an engine has decoded it, its own options (gguf's
`--gguf-type`) and its layout type (what a kind's `Kind.exports` entry for it is). `draftsmith
export`, `publish`, `crosscheck` and `draftsmith.shipping.engines` read their tables from these objects;
none of them lists format names.

The registry is lazy, as draftsmith/kinds.py is: "module:attr" strings, imported on first use,
and the format modules import nothing heavy, so `draftsmith --help` starts without torch. A
format outside this package (TensorRT-LLM, MLX, ...) registers through the Python entry-point
group `draftsmith.formats`; in its package's pyproject.toml:

    [project.entry-points."draftsmith.formats"]
    trtllm = "my_package.trtllm:FORMAT"

and `draftsmith export --format trtllm`, `publish` and the card take it up, with no file of
draftsmith edited. The models are Python's own plugin entry points (pytest, setuptools) and
transformers' lazy auto mappings.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import resolve

ENTRY_POINT_GROUP = "draftsmith.formats"
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
    write_ref:   "module:attr" of (checkpoint, out, *, num_speculative_tokens, verifier, **options)
                 -> notes for draftsmith_export.json (`serve` at least); `Format.write` calls it.
    check_ref:   "module:attr" of (folder, kind) -> what the folder gets wrong against the contract
                 ([] = nothing); `Format.check` calls it. (References, not the functions: looked up
                 at each call, as the module holds them now.)
    checked_against: the engine version and source files the contract was read from.
    crosscheck:  the engine `draftsmith crosscheck` decodes this export in (draftsmith/engines), or None.
    crosscheck_ref: "module:attr" of the engine driver's (setup, export, max_model_len, tokenizer)
                 -> (plain engine, engine with the draft, info): `export(**options)` writes this
                 format for the checkpoint under test and returns its folder.
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
    kinds:       kind -> layout reference ("module:attr", or None for `layout_type()`) for kinds
                 whose entry in draftsmith/kinds.py does not name this format: how a format from
                 outside the package says which kinds it takes (a kind's own entry wins).
    """

    name: str
    engine: str
    help: str
    layout_type: type
    write_ref: str
    check_ref: str
    checked_against: str
    crosscheck: str | None = None
    crosscheck_ref: str | None = None
    draft_first: bool = False
    proven: str = ""
    not_proven: str = ""
    options: tuple[Option, ...] = ()
    staged: bool = True
    requires: str | None = None
    requires_note: str = ""
    label: str = ""
    serve_names_target: bool = True
    kinds: dict = field(default_factory=dict)

    def write(self, ckpt, out, *, num_speculative_tokens: int, verifier: str, **options) -> dict:
        return resolve(self.write_ref)(
            ckpt, out, num_speculative_tokens=num_speculative_tokens, verifier=verifier, **options
        )

    def check(self, folder, kind: str) -> list[str]:
        return resolve(self.check_ref)(folder, kind)

    def applies_to(self, kind: str) -> bool:
        from draftsmith.kinds import get_kind

        return self.name in get_kind(kind).exports or kind in self.kinds

    def layout(self, kind: str):
        """The kind's layout in this format (the format's empty layout where the kind declares
        the format without one: "hf" for a new kind is its checkpoint as it is)."""
        from draftsmith.kinds import get_kind

        entry = get_kind(kind)
        if self.name not in entry.exports and kind in self.kinds:
            ref = self.kinds[kind]
            return resolve(ref) if ref else self.layout_type()
        return entry.layout(self.name) or self.layout_type()


def formats_of(kind: str) -> list[str]:
    """The formats a kind exports to: those its entry in draftsmith/kinds.py names, then those
    that name the kind themselves (`Format.kinds`)."""
    from draftsmith.kinds import get_kind

    own = list(get_kind(kind).exports)
    return own + [n for n in names() if n not in own and kind in get_format(n).kinds]


def kinds_of(fmt: str) -> tuple[str, ...]:
    """The kinds that export to format `fmt` (help texts read this, never a hand list)."""
    from draftsmith.kinds import KINDS

    return tuple(k for k in KINDS if get_format(fmt).applies_to(k))


@functools.cache
def _installed() -> tuple[tuple[str, str], ...]:
    """(name, "module:attr") of each format installed packages register (read once per process)."""
    from importlib.metadata import entry_points

    return tuple((ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP))


def _refs() -> dict[str, str]:
    """name -> "module:attr": the built-in formats, then those installed packages register."""
    refs = dict(BUILTIN)
    for name, ref in _installed():
        refs.setdefault(name, ref)
    return refs


def names() -> tuple[str, ...]:
    """Every export format's name (built-in first), without importing any format module."""
    return tuple(_refs())


def get_format(name: str) -> Format:
    """The Format called `name` (its module imported on first use)."""
    refs = _refs()
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
    "ENTRY_POINT_GROUP",
    "Format",
    "Option",
    "formats",
    "formats_of",
    "get_format",
    "kinds_of",
    "names",
]
