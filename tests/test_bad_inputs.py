"""Bad inputs and faults a new user meets (issue 16): each is refused with exit status 2 and one
`draftsmith: error:` line that names the problem, and leaves the named files byte for byte as
they were (nothing lost, nothing half-written).

One table, four sections (each engineer adds rows to theirs). A row is a `Case`:

    Case("id", ("train", "{tmp}/empty.yaml"), "is empty", setup=write("empty.yaml", ""))

- argv: the `draftsmith` command line. Placeholders: {tmp} (this case's own folder), {run} (a
  tiny draft_lm run trained once per module: recipe.yaml, step-*, final/; never modify it, copy
  it with `copy_run`), {tiny} (configs/tiny), {quick} expands to the QUICK overrides.
- line: text the single error line must contain.
- setup(tmp): writes the bad input into {tmp} before the command runs.
- unchanged: files or folders (placeholders allowed) hashed before and after: must be identical
  (they must exist beforehand, so a typo cannot make the check vacuous).
- absent: paths that must not exist afterwards (e.g. an output dir a refused run must not create).
- subprocess: run `python -m draftsmith` instead of `draftsmith.cli.main` in-process (slower:
  ~7 s of imports per case; for paths where the process itself matters).

The in-process call goes through `draftsmith.cli.main` (the console script's function) and so
runs the same code, argument parsing and error printing included.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny"
# A few seconds of tiny training; cases append their own --optim.max_steps etc.
QUICK = ("--data.max_rows=60", "--data.max_length=64", "--data.eval_rows=4", "--optim.batch_size=4",
         "--logging.progress=false", "--logging.acceptance_prompts=0", "--logging.eval_every=1000",
         "--logging.eval_batches=1")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    line: str
    setup: Callable[[pathlib.Path], None] | None = None
    unchanged: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    needs_run: bool = False  # set automatically when argv/unchanged/setup name {run}
    subprocess: bool = False


# --- helpers for setups -------------------------------------------------------------------------


def write(name: str, text: str | bytes) -> Callable[[pathlib.Path], None]:
    """A setup that writes `text` to {tmp}/name."""

    def setup(tmp: pathlib.Path) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return setup


def mkdir(name: str, mode: int | None = None) -> Callable[[pathlib.Path], None]:
    def setup(tmp: pathlib.Path) -> None:
        (tmp / name).mkdir(parents=True, exist_ok=True)
        if mode is not None:
            (tmp / name).chmod(mode)

    return setup


def copy_run(name: str = "run", then: Callable[[pathlib.Path], None] | None = None):
    """A setup that copies the module's trained run to {tmp}/name, then calls then(copy)."""

    def setup(tmp: pathlib.Path) -> None:
        dst = tmp / name
        shutil.copytree(RUN["path"], dst)
        if then is not None:
            then(dst)

    setup.needs_run = True
    return setup


def truncate(rel: str, size: int):
    """then-callback: cut {copy}/rel to its first `size` bytes."""

    def cut(run: pathlib.Path) -> None:
        path = run / rel
        data = path.read_bytes()
        assert len(data) > size, f"{path} is only {len(data)} bytes"
        path.write_bytes(data[:size])

    return cut


def delete(rel: str):
    def rm(run: pathlib.Path) -> None:
        (run / rel).unlink()

    return rm


# --- training and recipes -----------------------------------------------------------------------

TRAINING = [
    Case("unknown-key", ("train", "{tiny}/draft_lm.yaml", "--optim.lrr=1", "--output-dir", "{tmp}/out"),
         "unknown config key 'optim.lrr' (did you mean 'optim.lr'?)", absent=("{tmp}/out",)),
    Case("existing-checkpoints-without-resume", ("train", "{tiny}/draft_lm.yaml", "{quick}", "--output-dir", "{tmp}/run"),
         "already holds checkpoints: pass --resume", setup=copy_run(), unchanged=("{tmp}/run",)),
    Case("recipe-missing", ("train", "{tmp}/nope.yaml", "--output-dir", "{tmp}/out"), "not found", absent=("{tmp}/out",)),
]

# --- checkpoints, export, publish -------------------------------------------------------------

CHECKPOINTS = [
    Case("export-into-non-empty-folder", ("export", "{run}/final", "--format", "hf", "--output-dir", "{run}"),
         "exists and is not an empty folder", unchanged=("{run}",)),
]

# --- bench / eval (bench engineer) --------------------------------------------------------------

BENCH: list[Case] = []

# --- data files (data engineer) -----------------------------------------------------------------

DATA: list[Case] = []

CASES = TRAINING + CHECKPOINTS + BENCH + DATA


# --- the runner -----------------------------------------------------------------------------------

RUN: dict = {}  # the module's trained run, filled by the `trained_run` fixture


@pytest.fixture(scope="module")
def trained_run(tiny_cache, tmp_path_factory):
    """A tiny draft_lm run (2 steps, a checkpoint per step): recipe.yaml, step-*, final/."""
    from accelerate.state import AcceleratorState, GradientState

    from draftsmith.cli import main

    out = tmp_path_factory.mktemp("bad-inputs-run") / "run"
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    try:
        rc = main(["train", str(TINY / "draft_lm.yaml"), "--output-dir", str(out), *QUICK, "--optim.max_steps=2",
                   "--checkpoint.save_every=1"])
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    assert rc == 0 and (out / "final" / "model.safetensors").is_file()
    RUN["path"] = out
    return out


def _fill(text: str, tmp: pathlib.Path) -> str:
    return text.format(tmp=tmp, run=RUN.get("path", "{run}"), tiny=TINY)


def _argv(case: Case, tmp: pathlib.Path) -> list[str]:
    out = []
    for a in case.argv:
        out.extend(QUICK if a == "{quick}" else [_fill(a, tmp)])
    return out


def _uses_run(case: Case) -> bool:
    texts = (*case.argv, *case.unchanged, *case.absent)
    return case.needs_run or any("{run}" in t for t in texts) or getattr(case.setup, "needs_run", False)


def snapshot(path: pathlib.Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under `path` (or of `path` itself), plus folders."""
    path = pathlib.Path(path)
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    out = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def run_draftsmith(argv: list[str], capsys, in_subprocess: bool) -> tuple[int, str]:
    """(exit status, stderr) of `draftsmith argv`."""
    if in_subprocess:
        p = subprocess.run([sys.executable, "-m", "draftsmith", *argv], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        return p.returncode, p.stderr
    from draftsmith.cli import main

    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


def assert_one_clear_line(rc: int, err: str, expected: str) -> None:
    assert rc == 2, f"exit status {rc}, expected 2; stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("draftsmith: error:")]
    assert len(lines) == 1, f"expected one error line, got {lines}; stderr:\n{err[-3000:]}"
    assert expected in lines[0], f"{expected!r} not in {lines[0]!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, request, tmp_path, capsys, tiny_cache, fresh_accelerate):
    if _uses_run(case):
        request.getfixturevalue("trained_run")
    tmp = tmp_path / "case"
    tmp.mkdir()
    if case.setup is not None:
        case.setup(tmp)
    watched = {p: pathlib.Path(_fill(p, tmp)) for p in case.unchanged}
    for name, path in watched.items():
        assert path.exists(), f"unchanged: {name} -> {path} does not exist before the command"
    before = {name: snapshot(path) for name, path in watched.items()}
    rc, err = run_draftsmith(_argv(case, tmp), capsys, case.subprocess)
    assert_one_clear_line(rc, err, _fill(case.line, tmp))
    for name, path in watched.items():
        assert snapshot(path) == before[name], f"{name} changed"
    for name in case.absent:
        assert not pathlib.Path(_fill(name, tmp)).exists(), f"{name} was created"
