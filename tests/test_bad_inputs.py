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
import json
import os
import pathlib
import shutil
import subprocess
import sys
import typing
from collections.abc import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny"
# A few seconds of tiny training; cases append their own --optim.max_steps etc.
QUICK = (
    "--data.max_rows=60",
    "--data.max_length=64",
    "--data.eval_rows=4",
    "--optim.batch_size=4",
    "--logging.progress=false",
    "--logging.acceptance_prompts=0",
    "--logging.eval_every=1000",
    "--logging.eval_batches=1",
)


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
    Case(
        "unknown-key",
        ("train", "{tiny}/draft_lm.yaml", "--optim.lrr=1", "--output-dir", "{tmp}/out"),
        "unknown config key 'optim.lrr' (did you mean 'optim.lr'?)",
        absent=("{tmp}/out",),
    ),
    Case(
        "divergence-unknown",
        ("train", "{tiny}/eagle3.yaml", "--drafter.divergence=kl", "--output-dir", "{tmp}/out"),
        "config key 'drafter.divergence': 'kl' is not one of fkl, rkl, jsd, tvd",
        absent=("{tmp}/out",),
    ),
    Case(
        "divergence-ce-needs-token-labels",
        ("train", "{tiny}/eagle3.yaml", "--drafter.divergence=ce", "--output-dir", "{tmp}/out"),
        "'ce' is not one of fkl, rkl, jsd, tvd",
        absent=("{tmp}/out",),
    ),
    Case(
        "divergence-unused-by-token-labels",
        ("train", "{tiny}/medusa.yaml", "--drafter.divergence=tvd", "--output-dir", "{tmp}/out"),
        "set drafter.labels: distill",
        absent=("{tmp}/out",),
    ),
    Case(
        "data-source-unknown",
        ("train", "{tiny}/draft_lm.yaml", "--data.source=synthetic", "--output-dir", "{tmp}/out"),
        "config key 'data.source': 'synthetic' is not one of corpus, regenerated, on_policy",
        absent=("{tmp}/out",),
    ),
    Case(
        "on-policy-data-for-a-head",
        ("train", "{tiny}/eagle3.yaml", "--data.source=on_policy", "--output-dir", "{tmp}/out"),
        "data.source on_policy samples from the drafter",
        absent=("{tmp}/out",),
    ),
    Case(
        "existing-checkpoints-without-resume",
        ("train", "{tiny}/draft_lm.yaml", "{quick}", "--output-dir", "{tmp}/run"),
        "already holds checkpoints: pass --resume",
        setup=copy_run(),
        unchanged=("{tmp}/run",),
    ),
    Case(
        "recipe-missing", ("train", "{tmp}/nope.yaml", "--output-dir", "{tmp}/out"), "not found", absent=("{tmp}/out",)
    ),
    Case(
        "recipe-is-a-directory",
        ("train", "{tiny}", "--output-dir", "{tmp}/out"),
        "is a directory, not a YAML file",
        absent=("{tmp}/out",),
    ),
    Case(
        "recipe-empty",
        ("train", "{tmp}/empty.yaml", "--output-dir", "{tmp}/out"),
        "recipe {tmp}/empty.yaml is empty",
        setup=write("empty.yaml", ""),
        absent=("{tmp}/out",),
    ),
    Case(
        "recipe-only-comments",
        ("train", "{tmp}/c.yaml", "--output-dir", "{tmp}/out"),
        "is empty",
        setup=write("c.yaml", "# model:\n#   target: tiny-random\n"),
        absent=("{tmp}/out",),
    ),
    Case(
        "recipe-binary",
        ("train", "{tmp}/b.yaml", "--output-dir", "{tmp}/out"),
        "is not a text file",
        setup=write("b.yaml", bytes(range(256))),
        absent=("{tmp}/out",),
    ),
    Case(
        "recipe-bad-yaml",
        ("train", "{tmp}/y.yaml", "--output-dir", "{tmp}/out"),
        "is not valid YAML: while parsing a flow sequence (line 2, column 11)",
        setup=write("y.yaml", "model:\n  target: [tiny-random\n"),
        absent=("{tmp}/out",),
    ),
    Case(
        "eval-every-negative",
        ("train", "{tiny}/draft_lm.yaml", "--logging.eval_every=-5", "--output-dir", "{tmp}/out"),
        "config key 'logging.eval_every' must be >= 0 (0: only the final evaluation), got -5",
        absent=("{tmp}/out",),
    ),
    Case(
        "log-every-negative",
        ("train", "{tiny}/draft_lm.yaml", "--logging.log_every=-1", "--output-dir", "{tmp}/out"),
        "config key 'logging.log_every' must be >= 0",
        absent=("{tmp}/out",),
    ),
    Case(
        "save-every-negative",
        ("train", "{tiny}/medusa.yaml", "--checkpoint.save_every=-1", "--output-dir", "{tmp}/out"),
        "config key 'checkpoint.save_every' must be >= 0",
        absent=("{tmp}/out",),
    ),
    Case(
        "lr-infinite",
        ("train", "{tiny}/draft_lm.yaml", "--optim.lr=.inf", "--output-dir", "{tmp}/out"),
        "config key 'optim.lr': expected a finite number",
        absent=("{tmp}/out",),
    ),
    Case(
        "output-dir-is-a-file",
        ("train", "{tiny}/draft_lm.yaml", "{quick}", "--output-dir", "{tmp}/afile"),
        "output dir {tmp}/afile is a file, not a folder",
        setup=write("afile", "keep me"),
        unchanged=("{tmp}/afile",),
    ),
    Case(
        "output-dir-under-a-file",
        ("train", "{tiny}/draft_lm.yaml", "{quick}", "--output-dir", "{tmp}/afile/run"),
        "{tmp}/afile is a file",
        setup=write("afile", "keep me"),
        unchanged=("{tmp}/afile",),
    ),
    # Root writes anywhere its permissions allow, so /sys (EPERM even for root) stands in for a
    # read-only folder there; as another user a 0o555 folder is refused by the permission check.
    Case(
        "output-dir-read-only",
        (
            "train",
            "{tiny}/draft_lm.yaml",
            "{quick}",
            "--output-dir",
            "/sys/draftsmith-test-run" if os.geteuid() == 0 else "{tmp}/ro/run",
        ),
        "cannot be written",
        setup=mkdir("ro", 0o555),
        unchanged=("{tmp}/ro",),
        absent=("{tmp}/ro/run",),
    ),
    Case(
        "resume-with-another-kind",
        ("train", "{tiny}/medusa.yaml", "{quick}", "--output-dir", "{tmp}/run", "--resume"),
        "a 'draft_lm' checkpoint; this recipe trains a 'medusa' drafter",
        setup=copy_run(),
        unchanged=("{tmp}/run",),
    ),
    Case(
        "init-without-config",
        ("train", "{tiny}/draft_lm.yaml", "{quick}", "--drafter.init={tmp}/run/final", "--output-dir", "{tmp}/out"),
        "{tmp}/run/final/config.json is missing",
        setup=copy_run(then=delete("final/config.json")),
        unchanged=("{tmp}/run",),
        absent=("{tmp}/out",),
    ),
]

# --- checkpoints, export, publish -------------------------------------------------------------

CHECKPOINTS = [
    Case(
        "export-into-non-empty-folder",
        ("export", "{run}/final", "--format", "hf", "--output-dir", "{run}"),
        "exists and is not an empty folder",
        unchanged=("{run}",),
    ),
    *(
        Case(
            f"export-{fmt}-truncated-weights",
            ("export", "{tmp}/run/final", "--format", fmt, "--output-dir", "{tmp}/exp"),
            "{tmp}/run/final/model.safetensors is damaged: truncated",
            setup=copy_run(then=truncate("final/model.safetensors", 100_000)),
            unchanged=("{tmp}/run",),
            absent=("{tmp}/exp",),
        )
        for fmt in ("hf", "vllm")
    ),
    Case(
        "export-weights-shorter-than-a-header",
        ("export", "{tmp}/run/final", "--format", "hf", "--output-dir", "{tmp}/exp"),
        "shorter than a safetensors header",
        setup=copy_run(then=truncate("final/model.safetensors", 5)),
        unchanged=("{tmp}/run",),
        absent=("{tmp}/exp",),
    ),
    Case(
        "export-without-config",
        ("export", "{tmp}/run/final", "--format", "vllm", "--output-dir", "{tmp}/exp"),
        "{tmp}/run/final/config.json is missing",
        setup=copy_run(then=delete("final/config.json")),
        unchanged=("{tmp}/run",),
        absent=("{tmp}/exp",),
    ),
    Case(
        "publish-dry-run-truncated-weights",
        ("publish", "{tmp}/run/final", "--dry-run", "--stage-dir", "{tmp}/stage"),
        "{tmp}/run/final/model.safetensors is damaged: truncated",
        setup=copy_run(then=truncate("final/model.safetensors", 100_000)),
        unchanged=("{tmp}/run",),
        absent=("{tmp}/stage",),
    ),
    Case(
        "eval-draft-without-config",
        ("eval", "--draft", "{tmp}/run/final", "--num-prompts", "1", "--max-new-tokens", "2", "--quiet"),
        "{tmp}/run/final/config.json is missing",
        setup=copy_run(then=delete("final/config.json")),
        unchanged=("{tmp}/run",),
    ),
]

# --- bench / eval (bench engineer) --------------------------------------------------------------

EVAL = ("--target", "tiny-random", "--draft", "truncated:2", "--quiet")
BENCH: list[Case] = [
    # Numbers are checked before anything loads: with a target that does not exist, the number is what is named.
    Case(
        "max-new-tokens-zero",
        ("bench", "--target", "{tmp}/no-model", "--draft", "truncated:2", "--max-new-tokens", "0"),
        "--max-new-tokens must be >= 1, got 0",
    ),
    Case(
        "generate-max-new-tokens-zero",
        ("generate", "--target", "tiny-random", "--max-new-tokens", "0", "hi"),
        "--max-new-tokens must be >= 1, got 0",
    ),
    Case("num-prompts-negative", ("eval", *EVAL, "--num-prompts", "-1"), "--num-prompts must be >= 1, got -1"),
    Case("num-prompts-zero", ("bench", *EVAL, "--num-prompts", "0"), "--num-prompts must be >= 1, got 0"),
    Case(
        "temperature-negative",
        ("eval", *EVAL, "--temperature", "-0.5"),
        "--temperature must be >= 0 (0 = greedy), got -0.5",
    ),
    Case(
        "temperature-nan",
        ("generate", "--target", "tiny-random", "--temperature", "nan", "hi"),
        "--temperature must be >= 0",
    ),
    Case("top-p-zero", ("eval", *EVAL, "--top-p", "0"), "--top-p must be in (0, 1], got 0.0"),
    Case("top-p-above-one", ("bench", *EVAL, "--top-p", "1.5"), "--top-p must be in (0, 1], got 1.5"),
    Case("top-k-negative", ("eval", *EVAL, "--top-k", "-1"), "--top-k must be >= 0 (0 = off), got -1"),
    Case("k-zero", ("eval", *EVAL, "-k", "0"), "--num-speculative-tokens must be >= 1, got 0"),
    Case("tree-depth-zero", ("eval", *EVAL, "--tree-depth", "0"), "--tree-depth must be >= 1, got 0"),
    Case(
        "tree-tokens-one",
        ("bench", *EVAL, "--tree-num-draft-tokens", "1"),
        "--tree-num-draft-tokens must be >= 2 (it counts the root)",
    ),
    # Output paths are checked before the run (a finished run was lost to them at the end).
    Case(
        "json-is-a-directory",
        ("eval", *EVAL, "--json", "{tmp}/out"),
        "--json {tmp}/out is a directory: name a file in it",
        setup=mkdir("out"),
        unchanged=("{tmp}/out",),
    ),
    Case(
        "json-under-a-file",
        ("bench", *EVAL, "--json", "{tmp}/afile/r.json"),
        "{tmp}/afile is a file, not a folder",
        setup=write("afile", "keep me"),
        unchanged=("{tmp}/afile",),
    ),
    Case(
        "json-read-only",
        ("eval", *EVAL, "--json", "/sys/draftsmith-test/r.json" if os.geteuid() == 0 else "{tmp}/ro/r.json"),
        "cannot write in",
        setup=mkdir("ro", 0o555),
        unchanged=("{tmp}/ro",),
        absent=("{tmp}/ro/r.json",),
    ),
    Case(
        "plot-not-an-image",
        ("bench", *EVAL, "--plot", "{tmp}/p.txt"),
        "--plot {tmp}/p.txt: name a .png / .pdf / .svg",
        absent=("{tmp}/p.txt",),
    ),
    Case(
        "plot-is-a-directory",
        ("bench", *EVAL, "--plot", "{tmp}/p.png"),
        "--plot {tmp}/p.png is a directory",
        setup=mkdir("p.png"),
        unchanged=("{tmp}/p.png",),
    ),
    # A prompt past the target's positions (tiny-random: 2,048) is refused, not decoded into meaningless numbers.
    Case(
        "prompt-longer-than-the-context",
        ("eval", *EVAL, "--prompts", "{tmp}/long.jsonl", "--json", "{tmp}/r.json"),
        "has 4,800 tokens; with --max-new-tokens 128 and 4 draft tokens it needs 4,932 positions, but tiny-random has "
        "2,048",
        setup=write("long.jsonl", '{"prompt": "' + "word " * 960 + '"}\n'),
        unchanged=("{tmp}/long.jsonl",),
        absent=("{tmp}/r.json",),
    ),
    Case(
        "generate-prompt-longer-than-the-context",
        ("generate", "--target", "tiny-random", "word " * 960),
        "prompt given has 4,800 tokens; with --max-new-tokens 128 it needs 4,928 positions, but tiny-random has 2,048",
    ),
    Case(
        "max-new-tokens-past-the-context",
        ("generate", "--target", "tiny-random", "--max-new-tokens", "5000", "hi"),
        "--max-new-tokens 5000 leaves no room for a prompt in tiny-random's 2,048 positions",
    ),
]

# --- data files (data engineer) -----------------------------------------------------------------


def _train_on(name: str) -> tuple[str, ...]:
    return ("train", "{tiny}/draft_lm.yaml", "{quick}", "--data.path", "{tmp}/" + name, "--output-dir", "{tmp}/out")


DATA: list[Case] = [
    Case(
        "data-empty-jsonl",
        _train_on("empty.jsonl"),
        "data file {tmp}/empty.jsonl: the file is empty",
        setup=write("empty.jsonl", ""),
        unchanged=("{tmp}/empty.jsonl",),
    ),
    Case(
        "data-malformed-jsonl-line",
        _train_on("bad.jsonl"),
        "bad.jsonl: line 3 is not valid JSON",
        setup=write("bad.jsonl", '{"text": "one"}\n{"text": "two"}\n{"text": "three"\n{"text": "four"}\n'),
        unchanged=("{tmp}/bad.jsonl",),
    ),
    Case(
        "data-binary-file",
        _train_on("blob.jsonl"),
        "blob.jsonl: line 1 holds binary data",
        setup=write("blob.jsonl", bytes(range(256)) * 4),
        unchanged=("{tmp}/blob.jsonl",),
    ),
    Case(
        "data-not-utf8",
        _train_on("latin1.jsonl"),
        "latin1.jsonl: line 2 is not UTF-8 text",
        setup=write("latin1.jsonl", '{"text": "ok"}\n{"text": "caf\u00e9"}\n'.encode("latin-1")),
        unchanged=("{tmp}/latin1.jsonl",),
    ),
]

# --- draftsmith plan --------------------------------------------------------------------------------
PLAN = [
    Case("plan-gpus-zero", ("plan", "{tiny}/eagle3.yaml", "--gpus", "0"), "--gpus must be >= 1, got 0"),
    Case(
        "plan-gpu-memory-unparsable",
        ("plan", "{tiny}/eagle3.yaml", "--gpu-memory", "lots"),
        "--gpu-memory 'lots': expected a size like 80GB",
    ),
    Case(
        "plan-gpu-tflops-word",
        ("plan", "{tiny}/eagle3.yaml", "--gpu-tflops", "fast"),
        "--gpu-tflops 'fast': give a number or 'measured'",
    ),
    Case(
        "plan-utilisation-above-one",
        ("plan", "{tiny}/eagle3.yaml", "--utilisation", "1.5"),
        "--utilisation must be in (0, 1], got 1.5",
    ),
    Case("plan-unknown-override", ("plan", "{tiny}/eagle3.yaml", "--optim.lrr=1"), "unknown config key 'optim.lrr'"),
    Case("plan-fits-nowhere", ("plan", "{tiny}/eagle3.yaml", "--gpu-memory", "1MB"), "does not fit on 1 MB GPUs"),
]

CASES = TRAINING + CHECKPOINTS + BENCH + DATA + PLAN


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
        rc = main(
            [
                "train",
                str(TINY / "draft_lm.yaml"),
                "--output-dir",
                str(out),
                *QUICK,
                "--optim.max_steps=2",
                "--checkpoint.save_every=1",
            ]
        )
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
        p = subprocess.run(
            [sys.executable, "-m", "draftsmith", *argv],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
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


# --- one run per output dir, and refused runs change nothing --------------------------------------


def _start_training(out: pathlib.Path, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    """A training subprocess of 6 steps; returns once it has trained one (so it holds the output
    dir). Its stderr keeps being drained into the returned list."""
    import threading

    cmd = [
        sys.executable,
        "-m",
        "draftsmith",
        "train",
        str(TINY / "draft_lm.yaml"),
        "--output-dir",
        str(out),
        *QUICK,
        "--optim.max_steps=6",
        "--logging.log_every=1",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    lines: list[str] = []
    for line in proc.stderr:  # with logging.progress=false the run logs "step N ..." once per step
        lines.append(line)
        if line.startswith("step 1 "):
            break
    else:
        pytest.fail(f"the run ended before its first step (rc {proc.wait()}):\n{''.join(lines)[-3000:]}")
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return proc, lines


def test_second_run_into_a_busy_output_dir_is_refused_and_changes_nothing(
    tiny_cache, tmp_path, capsys, fresh_accelerate
):
    import signal

    out = tmp_path / "run"
    first, lines = _start_training(out, "--checkpoint.save_every=0", "--optim.seed=7")
    first.send_signal(signal.SIGSTOP)  # frozen while holding the folder: the test does not race its speed
    try:
        recipe = (out / "recipe.yaml").read_bytes()
        assert b"seed: 7" in recipe
        before = snapshot(out)
        # Without --resume (no checkpoint yet, so only the lock stops it) and with --resume.
        for extra in ([], ["--resume"]):
            rc, err = run_draftsmith(
                ["train", str(TINY / "draft_lm.yaml"), *QUICK, "--optim.max_steps=3", "--output-dir", str(out), *extra],
                capsys,
                in_subprocess=False,
            )
            assert_one_clear_line(rc, err, f"output dir {out} is in use by another training run (pid {first.pid} on ")
        assert snapshot(out) == before  # the refused runs wrote nothing (the first one is frozen)
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=600) == 0, "".join(lines)[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    # The first run finished as if alone: its recipe, its final checkpoint, intact.
    assert (out / "recipe.yaml").read_bytes() == recipe
    from draftsmith.models import read_drafter_meta
    from draftsmith.models.weights import check_weights
    from draftsmith.train.checkpoint import latest_checkpoint, verify

    summary = json.loads((out / "train_summary.json").read_text())
    assert read_drafter_meta(out / "final")["kind"] == "draft_lm"
    assert check_weights(out / "final") and verify(out / "final", resumable=False) == []
    assert summary["steps"] == 6 and latest_checkpoint(out).name == "step-0000006"


def test_a_killed_run_leaves_no_stale_lock(tiny_cache, tmp_path, capsys, fresh_accelerate):
    import signal

    out = tmp_path / "run"
    first, _ = _start_training(out, "--checkpoint.save_every=1")
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert (out / ".draftsmith-train.lock").is_file()  # the file stays; the kernel dropped the lock
    rc, err = run_draftsmith(
        ["train", str(TINY / "draft_lm.yaml"), *QUICK, "--optim.max_steps=2", "--output-dir", str(out), "--resume"],
        capsys,
        in_subprocess=False,
    )
    assert rc == 0, err[-3000:]
    assert (out / "final" / "model.safetensors").is_file()


def test_refused_resume_keeps_recipe_and_card(trained_run, tmp_path, capsys, fresh_accelerate):
    """Issue 16 item 1: a resume refused for another drafter kind rewrote recipe.yaml, and the
    model card then described that kind's recipe."""
    from draftsmith.hub import build_card

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    recipe = (run / "recipe.yaml").read_bytes()
    card = build_card(run / "final", [])
    rc, err = run_draftsmith(
        ["train", str(TINY / "medusa.yaml"), *QUICK, "--output-dir", str(run), "--resume"], capsys, in_subprocess=False
    )
    assert_one_clear_line(rc, err, "a 'draft_lm' checkpoint; this recipe trains a 'medusa' drafter")
    assert (run / "recipe.yaml").read_bytes() == recipe
    assert build_card(run / "final", []) == card and "kind: medusa" not in card


def _just_outside(spec: str, hint):
    """A value just outside a RANGES spec, of the field's type (a list field gets a list)."""
    from draftsmith.train.config import _leaf_types

    bounds = spec.split(" (")[0]
    if bounds.startswith(">="):
        value = float(bounds[2:]) - 1
    elif bounds.startswith(">"):
        value = float(bounds[1:])
    else:
        lo = float(bounds[1:-1].split(",")[0])
        value = lo - 1 if bounds[0] == "[" else lo
    if float not in _leaf_types(hint):
        value = int(value)
    return (
        [value, value] if list in (typing.get_origin(hint), *map(typing.get_origin, typing.get_args(hint))) else value
    )


def test_every_numeric_knob_has_a_range_that_is_enforced():
    """Each int/float knob of every section declares its range, and a value just outside it is
    refused naming the key (issue 16 item 7: eval_every=-5 was accepted)."""
    from draftsmith.train import config as c
    from draftsmith.train import kinds

    from draftsmith.errors import DraftsmithError

    sections = [
        ("model", c.ModelConfig, {}),
        ("data", c.DataConfig, {}),
        ("optim", c.OptimConfig, {}),
        ("checkpoint", c.CheckpointConfig, {}),
        ("logging", c.LoggingConfig, {}),
    ]
    for kind, cls in kinds.DRAFTER_CONFIGS.items():
        sections.append(("drafter", cls, {"kind": kind}))
        if "lora" in {f.name for f in dataclasses.fields(cls)}:
            sections.append(("drafter.lora", c.LoraConfig, {"kind": kind}))
    checked = 0
    for prefix, cls, drafter in sections:
        hints = typing.get_type_hints(cls)
        for name in c.numeric_fields(cls):
            spec = cls.RANGES.get(name)
            assert spec is not None, f"{prefix}.{name} has no range in {cls.__name__}.RANGES"
            if spec == "any":
                continue
            data: dict = {"drafter": dict(drafter)}
            node = data
            for part in prefix.split("."):
                node = node.setdefault(part, {})
            node[name] = _just_outside(spec, hints[name])
            with pytest.raises(DraftsmithError, match=rf"config key '{prefix}.{name}' must be"):
                kinds.recipe_from_dict(data)
            checked += 1
    assert checked >= 40
