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

# --- the 224-case probe's last findings (issue 28) ----------------------------------------------
# {ck[KIND]}: a tiny run of that kind (run/final), trained once per module on first use.


def copy_ckpt(kind: str, name: str, then: Callable[[pathlib.Path], None] | None = None):
    """A setup that copies the module's tiny `kind` checkpoint (its final/) to {tmp}/name, then calls then(copy)."""

    def setup(tmp: pathlib.Path) -> None:
        dst = tmp / name
        shutil.copytree(CKPTS[kind] / "final", dst)
        if then is not None:
            then(dst)

    return setup


def edit_json(rel: str, **changes):
    """then-callback: set keys of the JSON file {copy}/rel."""

    def edit(folder: pathlib.Path) -> None:
        path = folder / rel
        data = json.loads(path.read_text())
        data.update(changes)
        path.write_text(json.dumps(data))

    return edit


def remove_tree(rel: str):
    def rm(folder: pathlib.Path) -> None:
        shutil.rmtree(folder / rel)

    return rm


def result_of(kind: str, name: str, alter_weights: bool = False):
    """A setup writing {tmp}/name: an `eval --json` result as it records the tiny `kind` checkpoint.
    alter_weights: the result of a copy of that checkpoint whose weights differ (a retrained one)."""

    def setup(tmp: pathlib.Path) -> None:
        from draftsmith.models import checkpoint_identity

        ckpt = CKPTS[kind] / "final"
        if alter_weights:
            other = tmp / "retrained"
            shutil.copytree(ckpt, other)
            with open(other / "model.safetensors", "r+b") as f:  # one byte of the last tensor's data
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([last[0] ^ 1]))
            ckpt = other
        meta = json.loads((ckpt / "drafter.json").read_text())
        result = {
            "target": meta["target"],
            "draft": str(ckpt),
            "drafter_kind": meta["kind"],
            "draft_checkpoint": checkpoint_identity(ckpt),
            "num_speculative_tokens": 3,
            "mean_acceptance_length": 1.5,
            "per_position_acceptance": [0.3, 0.1, 0.1],
        }
        (tmp / name).write_text(json.dumps(result))

    return setup


def _read_only(name: str) -> str:
    """A path in a folder this process cannot write: root writes anywhere its permissions allow,
    so /sys (EPERM even for root) stands in; as another user {tmp}/ro (0o555, see ro_setup)."""
    return f"/sys/draftsmith-test/{name}" if os.geteuid() == 0 else "{tmp}/ro/" + name


GEN = ("generate", "--target", "tiny-random", "--max-new-tokens", "4")
EVAL1 = ("--target", "tiny-random", "--prompts", "chat", "--num-prompts", "1", "--max-new-tokens", "4", "--quiet")

PROBE: list[Case] = [
    # Wrong results: a K the drafter cannot draft is refused by the one check, on every command.
    Case(
        "dflash-k-above-its-block-eval",
        ("eval", *EVAL1, "--draft", "{ck[dflash]}/final", "-k", "10", "--json", "{tmp}/d.json"),
        "-k/--num-speculative-tokens 10: {ck[dflash]}/final (a dflash drafter) drafts at most 3 tokens per step",
        absent=("{tmp}/d.json",),
    ),
    Case(
        "dflash-k-above-its-block-generate",
        (*GEN, "--draft", "{ck[dflash]}/final", "-k", "4", "Hi"),
        "-k/--num-speculative-tokens 4: {ck[dflash]}/final (a dflash drafter) drafts at most 3 tokens per step",
    ),
    Case(
        "dflash-k-above-its-block-export",
        ("export", "{ck[dflash]}/final", "--format", "vllm", "-k", "10", "--output-dir", "{tmp}/e"),
        "-k/--num-speculative-tokens 10: this dflash checkpoint (num_speculative_tokens=3) drafts at most 3 tokens",
        absent=("{tmp}/e",),
    ),
    Case(
        "pard-k-above-its-training",
        ("eval", *EVAL1, "--draft", "{ck[pard]}/final", "-k", "9"),
        "-k/--num-speculative-tokens 9: {ck[pard]}/final (a pard drafter) drafts at most 4 tokens per step",
    ),
    Case(
        "medusa-k-above-its-heads-bench",
        ("bench", *EVAL1, "--draft", "{ck[medusa]}/final", "-k", "5", "--json", "{tmp}/b.json"),
        "-k/--num-speculative-tokens 5: {ck[medusa]}/final (a medusa drafter) drafts at most 4 tokens per step",
        absent=("{tmp}/b.json",),
    ),
    Case(
        "publish-results-of-another-kind",
        ("publish", "{ck[eagle3]}/final", "--dry-run", "--results", "{tmp}/d.json", "--stage-dir", "{tmp}/stage"),
        "--results d.json belongs to another checkpoint: it measured a dflash drafter",
        setup=result_of("dflash", "d.json"),
        unchanged=("{tmp}/d.json",),
        absent=("{tmp}/stage",),
    ),
    Case(
        "publish-results-of-another-checkpoint-of-the-kind",
        ("publish", "{ck[eagle3]}/final", "--dry-run", "--results", "{tmp}/r.json", "--stage-dir", "{tmp}/stage"),
        "--results r.json belongs to another checkpoint: it measured the checkpoint {tmp}/retrained",
        setup=result_of("eagle3", "r.json", alter_weights=True),
        absent=("{tmp}/stage",),
    ),
    # Output folders that cannot be written, or that another export fills (test_export_race below).
    Case(
        "export-into-a-read-only-folder",
        ("export", "{ck[eagle]}/final", "--format", "hf", "--output-dir", _read_only("e")),
        "cannot write in",
        setup=mkdir("ro", 0o555),
        unchanged=("{tmp}/ro",),
    ),
    Case(
        "publish-stage-dir-read-only",
        ("publish", "{ck[eagle3]}/final", "--dry-run", "--stage-dir", _read_only("s")),
        "cannot write there",
        setup=mkdir("ro", 0o555),
        unchanged=("{tmp}/ro",),
    ),
    # Damaged checkpoints are named as damaged (not as our internal error, not a KeyError).
    *(
        Case(
            f"medusa-config-says-more-heads-{name}",
            (argv[0], "{tmp}/moreheads", *argv[1:]),
            "checkpoint {tmp}/moreheads is damaged",
            setup=copy_ckpt("medusa", "moreheads", edit_json("config.json", num_heads=6)),
            unchanged=("{tmp}/moreheads",),
            absent=("{tmp}/e", "{tmp}/stage"),
        )
        for name, argv in (
            ("export-vllm", ("export", "--format", "vllm", "--output-dir", "{tmp}/e")),
            ("export-hf", ("export", "--format", "hf", "--output-dir", "{tmp}/e")),
            ("publish", ("publish", "--dry-run", "--stage-dir", "{tmp}/stage")),
        )
    ),
    *(
        Case(
            f"medusa2-without-its-target-{cmd[0]}",
            (cmd[0], "{tmp}/m2", *cmd[1:]),
            "its fine-tuned target target/ (drafter.json's target_path) is missing",
            setup=copy_ckpt("medusa2", "m2", remove_tree("target")),
            unchanged=("{tmp}/m2",),
            absent=("{tmp}/e", "{tmp}/stage"),
        )
        for cmd in (
            ("export", "--format", "vllm", "--output-dir", "{tmp}/e"),
            ("publish", "--dry-run", "--stage-dir", "{tmp}/stage"),
        )
    ),
    Case(
        "draft-an-empty-folder",
        (*GEN, "--draft", "{tmp}/empty", "Hi"),
        "--draft {tmp}/empty: the folder is empty",
        setup=mkdir("empty"),
    ),
    Case(
        "draft-eagle3-without-drafter-json",
        (*GEN, "--draft", "{tmp}/nodrafter", "Hi"),
        "a damaged eagle3 checkpoint: drafter.json is missing",
        setup=copy_ckpt("eagle3", "nodrafter", delete("drafter.json")),
        unchanged=("{tmp}/nodrafter",),
    ),
    # Devices and numbers, named with the flag that is wrong.
    Case("device-cuda-without-cuda", (*GEN, "--device", "cuda", "Hi"), "--device cuda: no cuda device is available"),
    Case("device-unknown", (*GEN, "--device", "tpu9", "Hi"), "--device 'tpu9': not a device name torch knows"),
    Case("prompt-lookup-zero", (*GEN, "--draft", "prompt_lookup:0", "Hi"), "prompt_lookup:0': N, the longest n-gram"),
    Case(
        "seed-past-64-bits",
        (*GEN, "--seed", "99999999999999999999999", "Hi"),
        "--seed must be in [0, 9223372036854775807], got 99999999999999999999999",
    ),
    Case("temperature-infinite", (*GEN, "--temperature", "inf", "Hi"), "--temperature must be >= 0 and finite"),
    Case(
        "k-past-the-context-blames-k",
        ("generate", "--target", "tiny-random", "--draft", "truncated:2", "-k", "5000", "Hi"),
        "-k/--num-speculative-tokens asks for 5000 draft tokens per step",
    ),
    Case(
        "prompts-a-folder",
        ("eval", "--target", "tiny-random", "--draft", "truncated:2", "--quiet", "--prompts", "{tmp}/rec"),
        "--prompts {tmp}/rec is a folder that holds no dataset",
        setup=write("rec/a.yaml", "model:\n  target: tiny-random\n"),
        unchanged=("{tmp}/rec",),
    ),
    Case(
        "train-output-dir-empty-string",
        ("train", "{tiny}/draft_lm.yaml", "--output-dir", ""),
        '--output-dir "": name the run folder',
    ),
    Case(
        "gguf-type-with-hf",
        ("export", "{run}/final", "--format", "hf", "--gguf-type", "f32", "--output-dir", "{tmp}/g"),
        "--gguf-type applies to --format gguf only",
        absent=("{tmp}/g",),
    ),
]

# --- draftsmith plan --------------------------------------------------------------------------------
# (its numbers are refused as they are parsed: test_plan_numbers_are_refused_as_they_are_parsed)
PLAN = [
    Case("plan-unknown-override", ("plan", "{tiny}/eagle3.yaml", "--optim.lrr=1"), "unknown config key 'optim.lrr'"),
    Case("plan-fits-nowhere", ("plan", "{tiny}/eagle3.yaml", "--gpu-memory", "1MB"), "does not fit on 1 MB GPUs"),
]

CASES = TRAINING + CHECKPOINTS + BENCH + DATA + PROBE + PLAN


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


class _Checkpoints(dict):
    """kind -> a tiny run folder of that kind (recipe.yaml, final/), trained on first use (2 steps)
    and shared by the module's cases; `root` is set by the first test that needs one."""

    root: pathlib.Path | None = None

    def __missing__(self, kind: str) -> pathlib.Path:
        from accelerate.state import AcceleratorState, GradientState

        from draftsmith.cli import main

        recipe, extra = (kind, []) if kind != "medusa2" else ("medusa2", ["--data.regenerate=false"])
        out = self.root / kind
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        try:
            rc = main(["train", str(TINY / f"{recipe}.yaml"), "--output-dir", str(out), *QUICK, *extra])
        finally:
            AcceleratorState._reset_state(True)
            GradientState._reset_state()
        assert rc == 0 and (out / "final" / "drafter.json").is_file(), f"training the tiny {kind} failed"
        self[kind] = out
        return out


CKPTS = _Checkpoints()


def _fill(text: str, tmp: pathlib.Path) -> str:
    return text.format(tmp=tmp, run=RUN.get("path", "{run}"), tiny=TINY, ck=CKPTS)


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
def test_bad_input(case, request, tmp_path, tmp_path_factory, capsys, tiny_cache, fresh_accelerate):
    if _uses_run(case):
        request.getfixturevalue("trained_run")
    if CKPTS.root is None:
        CKPTS.root = tmp_path_factory.mktemp("bad-inputs-kinds")
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
    from draftsmith.train.trainer.checkpoint import latest_checkpoint, verify

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
    from draftsmith.shipping.hub import build_card

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
    """A value just outside a range spec (config.ranges), of the field's type (a list field gets a list)."""
    from draftsmith.train.recipe_bounds import _leaf_types

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
    from draftsmith import kinds
    from draftsmith.errors import DraftsmithError
    from draftsmith.train import config as c
    from draftsmith.train.config import recipe_from_dict

    sections = [
        ("model", c.ModelConfig, {}),
        ("data", c.DataConfig, {}),
        ("optim", c.OptimConfig, {}),
        ("checkpoint", c.CheckpointConfig, {}),
        ("logging", c.LoggingConfig, {}),
    ]
    for kind, cls in kinds.drafter_configs().items():
        sections.append(("drafter", cls, {"kind": kind}))
        if "lora" in {f.name for f in dataclasses.fields(cls)}:
            sections.append(("drafter.lora", c.LoraConfig, {"kind": kind}))
    checked = 0
    for prefix, cls, drafter in sections:
        hints = typing.get_type_hints(cls)
        for name in c.numeric_fields(cls):
            spec = c.ranges(cls).get(name)
            assert spec is not None, f"{prefix}.{name} declares no bounds in {cls.__name__}"
            if spec == "any":
                continue
            data: dict = {"drafter": dict(drafter)}
            node = data
            for part in prefix.split("."):
                node = node.setdefault(part, {})
            node[name] = _just_outside(spec, hints[name])
            with pytest.raises(DraftsmithError, match=rf"config key '{prefix}.{name}' must be"):
                recipe_from_dict(data)
            checked += 1
    assert checked >= 40


# --- the probe's findings that are not a refused command (issue 28) -----------------------------


def test_export_race_loser_gets_one_line(trained_run, tmp_path, capsys, monkeypatch):
    """Two exports into one folder at once: the one that finishes second is refused in one line,
    and the winner's files stay as they are (here the winner lands while the loser writes)."""
    from draftsmith.shipping.export import hf

    out = tmp_path / "race"
    write = hf.write

    def lose(ckpt, folder, **kw):
        notes = write(ckpt, folder, **kw)
        out.mkdir()
        (out / "winner.txt").write_text("the other export")
        return notes

    monkeypatch.setattr(hf, "write", lose)
    rc, err = run_draftsmith(
        ["export", str(trained_run / "final"), "--format", "hf", "--output-dir", str(out)], capsys, False
    )
    assert_one_clear_line(rc, err, f"--output-dir {out} was filled by another export while this one ran")
    assert sorted(p.name for p in out.iterdir()) == ["winner.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["race"]  # no temporary folder left behind


def test_resolve_checkpoint_takes_best_then_final(tmp_path):
    from draftsmith.models import resolve_checkpoint, write_drafter_meta

    run = tmp_path / "run"
    for name in ("final", "step-0000002"):
        (run / name).mkdir(parents=True)
        write_drafter_meta(run / name, "eagle", "tiny-random")
    assert resolve_checkpoint(run) == run / "final"
    assert resolve_checkpoint(run / "step-0000002") == run / "step-0000002"  # a checkpoint is itself
    (run / "best").mkdir()
    write_drafter_meta(run / "best", "eagle", "tiny-random")
    assert resolve_checkpoint(run) == run / "best"
    assert resolve_checkpoint(tmp_path / "absent") == tmp_path / "absent"  # the caller names the problem
    assert str(resolve_checkpoint("smollm2-135m-instruct")) == "smollm2-135m-instruct"


def test_draft_a_run_folder_decodes_with_its_final_checkpoint(trained_run, capsys, caplog, fresh_accelerate):
    import logging

    caplog.set_level(logging.INFO)
    rc, err = run_draftsmith(
        ["generate", "--target", "tiny-random", "--draft", str(trained_run), "--max-new-tokens", "4", "Hi"],
        capsys,
        False,
    )
    assert rc == 0, err[-3000:]
    assert f"--draft {trained_run} is a training run: using its final/ checkpoint" in caplog.text
    assert json.loads(err.strip().splitlines()[-1])["drafts"] > 0  # it did draft with the checkpoint


def test_drafter_json_naming_another_target_warns(trained_run, tmp_path, capsys, caplog, fresh_accelerate):
    import logging

    ckpt = tmp_path / "mism"
    shutil.copytree(trained_run / "final", ckpt)
    edit_json("drafter.json", target="qwen2.5-coder-1.5b-instruct")(ckpt)
    caplog.set_level(logging.INFO)
    rc, err = run_draftsmith(
        ["generate", "--target", "tiny-random", "--draft", str(ckpt), "--max-new-tokens", "4", "Hi"], capsys, False
    )
    assert rc == 0, err[-3000:]
    assert f"{ckpt} was trained against qwen2.5-coder-1.5b-instruct; decoding with --target tiny-random" in caplog.text


def test_publish_takes_results_measured_with_this_checkpoint(trained_run, tmp_path, capsys, fresh_accelerate):
    """eval --json records the checkpoint's identity, and publish --results accepts exactly that."""
    from draftsmith.models import checkpoint_identity

    ckpt, result = trained_run / "final", tmp_path / "r.json"
    rc, err = run_draftsmith(
        ["eval", *EVAL1[:2], "--draft", str(ckpt), *EVAL1[2:], "--json", str(result)], capsys, False
    )
    assert rc == 0, err[-3000:]
    recorded = json.loads(result.read_text())["draft_checkpoint"]
    assert recorded == checkpoint_identity(ckpt) and recorded["kind"] == "draft_lm" and len(recorded["sha256"]) == 64
    rc, err = run_draftsmith(
        ["publish", str(ckpt), "--dry-run", "--results", str(result), "--stage-dir", str(tmp_path / "s")], capsys, False
    )
    assert rc == 0, err[-3000:]
    assert (tmp_path / "s" / "results" / "r.json").is_file()


@pytest.mark.parametrize("with_json", [True, False], ids=["json", "no-json"])
def test_ctrl_c_during_bench_keeps_the_finished_runs(with_json, tmp_path, capsys, monkeypatch, tiny_cache):
    """SIGINT (KeyboardInterrupt) at the 4th timed run of 6: the 3 that finished are written,
    marked partial, and the one line says so; nothing claims a resume."""
    from draftsmith.infer.engine import Engine

    calls = {"n": 0}
    generate = Engine.generate

    def interrupt_after(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2 + 4:  # 2 warm-up runs (plain, speculative), then the 4th timed run
            raise KeyboardInterrupt
        return generate(self, *a, **kw)

    monkeypatch.setattr(Engine, "generate", interrupt_after)
    out = tmp_path / "b.json"
    argv = ["bench", *EVAL1[:2], "--draft", "truncated:2", "--prompts", "chat", "--num-prompts", "3"]
    argv += ["--max-new-tokens", "4", "--quiet", "--no-hf", *(["--json", str(out)] if with_json else [])]
    argv += ["-k", "2"]  # a fixed K: two methods (adaptive K would add the fixed K beside it)
    rc, err = run_draftsmith(argv, capsys, False)
    assert rc == 130, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("draftsmith: interrupted")]
    assert (
        len(lines) == 1
        and "3 of 6 runs had finished" in lines[0]
        and "resume" not in lines[0].replace("nothing resumes", "")
    ), lines
    if not with_json:
        assert "nothing was kept" in lines[0] and not out.exists()
        return
    assert f"they are in {out}, marked partial" in lines[0]
    partial = json.loads(out.read_text())["partial"]
    assert partial["runs_done"] == 3 and partial["runs_total"] == 6
    assert sum(m["runs"] for m in partial["methods"].values()) == 3
    assert partial["methods"]["speculative"]["drafts"] > 0


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_features_output_that_cannot_be_a_folder(kind, tmp_path, capsys, tiny_cache):
    from draftsmith.train.features.cli import main

    if kind == "file":
        target, watched, line = tmp_path / "afile", tmp_path / "afile", f"--output {tmp_path / 'afile'} is a file"
        target.write_text("keep me")
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        watched = tmp_path / "ro"
        target = pathlib.Path("/sys/draftsmith-test/f") if os.geteuid() == 0 else tmp_path / "ro" / "f"
        line = "cannot write in"
    before = snapshot(watched)
    capsys.readouterr()
    rc = main([str(TINY / "eagle.yaml"), "--output", str(target)])
    assert_one_clear_line(rc, capsys.readouterr().err, line)
    assert snapshot(watched) == before and not (tmp_path / "ro" / "f").exists()


def test_help_texts_come_from_the_kind_registry():
    """crosscheck's engines per kind, export's formats per kind: read from KINDS, never a hand list;
    the top-level help names every export format; kind names take their article."""
    from draftsmith.cli import build_parser
    from draftsmith.errors import DraftsmithError
    from draftsmith.kinds import kinds_with
    from draftsmith.models import write_drafter_meta
    from draftsmith.shipping.export import FORMATS, export

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    flat = {name: " ".join(sub[name].format_help().split()) for name in ("crosscheck", "export")}
    for engine in ("vllm", "llamacpp"):
        assert f"{engine} ({', '.join(kinds_with(engine))})" in flat["crosscheck"]
    assert {"pard", "dflash"} <= set(kinds_with("vllm"))
    for fmt in FORMATS:
        assert f"({', '.join(kinds_with(fmt, 'exports'))})" in flat["export"], fmt
    assert "dflash" in kinds_with("sglang", "exports")
    assert f"({', '.join(FORMATS)})" in " ".join(parser.format_help().split())
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = pathlib.Path(tmp) / "e"
        ckpt.mkdir()
        write_drafter_meta(ckpt, "eagle", "tiny-random")
        with pytest.raises(DraftsmithError, match="does not apply to an eagle checkpoint"):
            export(ckpt, "sglang", pathlib.Path(tmp) / "out")


# --- the probe's unusual inputs: plan, features, checkpoints, the Python API ------------------------

PLAN_PARSE = [
    (("--scored-fraction", "-1"), "argument --scored-fraction: must be in (0, 1], got -1"),
    (("--scored-fraction", "5"), "argument --scored-fraction: must be in (0, 1], got 5"),
    (("--scored-fraction", "0"), "argument --scored-fraction: must be in (0, 1], got 0"),
    (("--gpu-tflops", "-10"), "argument --gpu-tflops: '-10': give a finite TFLOP/s figure > 0, or 'measured'"),
    (("--gpu-tflops", "nan"), "argument --gpu-tflops: 'nan': give a finite TFLOP/s figure > 0"),
    (("--gpu-tflops", "0"), "argument --gpu-tflops: '0': give a finite TFLOP/s figure > 0"),
    (("--gpu-tflops", "fast"), "argument --gpu-tflops: 'fast': give a finite TFLOP/s figure > 0, or 'measured'"),
    (("--epoch-tokens", "-5"), "argument --epoch-tokens: must be > 0, got -5"),
    (("--epoch-tokens", "0"), "argument --epoch-tokens: must be > 0, got 0"),
    (("--epoch-tokens", "inf"), "argument --epoch-tokens: 'inf': give a finite number"),
    (("--device", "tpu"), "argument --device: invalid choice: 'tpu'"),
    (("--gpu-memory", "1.2.3GB"), "argument --gpu-memory: '1.2.3GB': expected a size like 80GB or 141GB"),
    (("--gpu-memory", "."), "argument --gpu-memory: '.': expected a size like 80GB"),
    (("--gpu-memory", "lots"), "argument --gpu-memory: 'lots': expected a size like 80GB"),
    (("--gpu-memory", "0GB"), "argument --gpu-memory: '0GB': expected a size like 80GB"),
    (("--json", ""), "argument --json: name a file, e.g. plan.json"),
    (("--gpus", "0"), "argument --gpus: must be >= 1, got 0"),
    (("--nodes", "two"), "argument --nodes: 'two' is not a whole number"),
    (("--utilisation", "1.5"), "argument --utilisation: must be in (0, 1], got 1.5"),
    (("--regen-concurrency", "0"), "argument --regen-concurrency: must be >= 1, got 0"),
    (("--regen-replicas", "two"), "argument --regen-replicas: 'two' is not a whole number"),
    (("--regen-tp", "-1"), "argument --regen-tp: must be >= 1, got -1"),
]


@pytest.mark.parametrize("args, line", PLAN_PARSE, ids=[" ".join(a) for a, _ in PLAN_PARSE])
def test_plan_numbers_are_refused_as_they_are_parsed(args, line, capsys):
    """A negative, zero, NaN or malformed figure was planned with (a negative memory share, NaN
    tokens/s, a vanished epoch) or crashed: argparse's one line now, before the recipe loads."""
    from draftsmith.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["plan", str(TINY / "eagle3.yaml"), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and line in errors[0], err


def test_plan_numbers_in_range_are_planned_with(capsys):
    from draftsmith.cli import main

    capsys.readouterr()
    argv = ["plan", str(TINY / "eagle3.yaml"), "--scored-fraction", "1", "--gpu-tflops", "2.5", "--epoch-tokens"]
    assert main([*argv, "1e6", "--gpu-memory", ".5GB", "--device", "cpu", "--gpus", "1"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert "fits with" in summary and "of 0.5 GB per GPU" in summary and "at 2.5 TFLOP/s" in summary
    assert "epoch ~" in summary and "nan" not in summary and "~-" not in summary


PROBE_ROWS = [
    Case(
        "plan-json-a-folder",
        ("plan", "{tiny}/eagle3.yaml", "--json", "{tmp}/out"),
        "--json {tmp}/out is a directory",
        setup=mkdir("out"),
        unchanged=("{tmp}/out",),
    ),
    Case(
        "plan-json-under-a-file",
        ("plan", "{tiny}/eagle3.yaml", "--json", "{tmp}/notes/plan.json"),
        "--json {tmp}/notes/plan.json: {tmp}/notes is a file, not a folder",
        setup=write("notes", "keep"),
        unchanged=("{tmp}/notes",),
    ),
    Case(
        "plan-target-folder-without-config",
        ("plan", "{tiny}/eagle3.yaml", "--model.target={tmp}/model"),
        "model.target {tmp}/model: the folder has no config.json",
        setup=write("model/weights.bin", "x"),
        unchanged=("{tmp}/model",),
    ),
    Case(
        "features-into-an-unrelated-folder",
        ("features", "{tiny}/eagle3.yaml", "--output", "{tmp}/mine", "--data.max_rows=8"),
        "--output {tmp}/mine holds other files (notes.txt) and is not a feature cache",
        setup=write("mine/notes.txt", "keep"),
        unchanged=("{tmp}/mine",),
    ),
    Case(
        "features-layers-empty",
        ("features", "{tiny}/eagle3.yaml", "--output", "{tmp}/f", "--layers", "", "--data.max_rows=8"),
        "--layers '': expected comma-separated integers",
        absent=("{tmp}/f",),
    ),
    Case(
        "features-layers-duplicate",
        ("features", "{tiny}/eagle3.yaml", "--output", "{tmp}/f", "--layers", "2,2,-1", "--data.max_rows=8"),
        "--layers lists hidden state 2 twice",
        absent=("{tmp}/f",),
    ),
    Case(
        "features-layers-negative-names-a-listed-one",
        ("features", "{tiny}/eagle3.yaml", "--output", "{tmp}/f", "--layers", "8,-1", "--data.max_rows=8"),
        "(8 and -1 are both hidden state 8)",
        absent=("{tmp}/f",),
    ),
    Case(
        "generate-typical-lossy-without-a-draft",
        ("generate", "--target", "tiny-random", "--verification", "typical-lossy", "--temperature", "0.7", "Hi"),
        "--verification typical-lossy needs a --draft",
    ),
]


@pytest.mark.parametrize("case", PROBE_ROWS, ids=[c.id for c in PROBE_ROWS])
def test_probe_row(case, request, tmp_path, tmp_path_factory, capsys, tiny_cache, fresh_accelerate):
    test_bad_input(case, request, tmp_path, tmp_path_factory, capsys, tiny_cache, fresh_accelerate)


def test_plan_json_that_cannot_be_written_is_one_line_before_the_table(tmp_path, capsys):
    from draftsmith.cli import main

    (tmp_path / "ro").mkdir(mode=0o555)
    path = pathlib.Path("/sys/draftsmith-test/p.json") if os.geteuid() == 0 else tmp_path / "ro" / "p.json"
    capsys.readouterr()
    rc = main(["plan", str(TINY / "eagle3.yaml"), "--json", str(path)])
    out, err = capsys.readouterr()
    assert_one_clear_line(rc, err, f"--json {path}: cannot write in")
    assert "plan: " not in out and not path.exists()


def test_plan_json_on_a_full_disk_leaves_no_file(tmp_path, capsys, monkeypatch):
    import errno

    from draftsmith.cli import main

    real = pathlib.Path.write_text

    def full(self, *a, **k):
        if self.parent == tmp_path:
            real(self, '{"half": ', **k)  # what fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    capsys.readouterr()
    rc = main(["plan", str(TINY / "eagle3.yaml"), "--json", str(tmp_path / "p.json")])
    out, err = capsys.readouterr()
    assert_one_clear_line(rc, err, f"--json {tmp_path / 'p.json'}: cannot write it (No space left on device)")
    assert out.strip().splitlines()[-1].startswith("plan: ")  # the table was printed
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


def test_plan_of_a_lora_draft_prints_no_deprecation_warning(recwarn, capsys):
    """peft reads transformers' deprecated is_gradient_checkpointing: muted at that one call."""
    import warnings

    from draftsmith.cli import main

    warnings.simplefilter("always")
    lora = ["--drafter.lora.r=4", "--drafter.lora.target_modules=[q_proj,v_proj]"]
    assert main(["plan", str(TINY / "draft_lm.yaml"), *lora]) == 0
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)], [str(w.message) for w in recwarn]


def test_disk_full_in_a_shard_leaves_no_shard_and_one_line(tiny_target, tmp_path, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError: one line, no half shard under
    any name, the finished shards kept, no manifest (the cache does not look complete)."""
    import safetensors.torch
    from safetensors import SafetensorError

    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import DataConfig
    from draftsmith.train.data import build_data
    from draftsmith.train.features import extract

    rows = build_data(
        DataConfig(path="stdlib", eval_rows=2, max_rows=6, max_length=64), tiny_target.tokenizer, progress=False
    ).train
    real, written = safetensors.torch.save_file, []

    def full(tensors, filename, metadata=None):
        if written:
            pathlib.Path(filename).write_bytes(b"\0" * 100)  # what fitted
            raise SafetensorError(
                f"Error while serializing: I/O error: No space left on device (os error 28) at path {filename!r}"
            )
        written.append(filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(DraftsmithError, match=r"^disk full \(No space left on device\) while writing .*shard-00001"):
        extract(tiny_target, (1, -1), rows, tmp_path / "c", max_length=64, shard_rows=1, progress=False)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["settings.json", "shard-00000.safetensors"]


def test_disk_full_in_a_checkpoints_weights_keeps_the_previous_one(tiny_cache, tmp_path, monkeypatch, capsys):
    """The weights transformers writes through safetensors meet a full disk (SafetensorError, not
    OSError): one line naming the run folder, step 1 intact, the partial folder gone."""
    import transformers.modeling_utils as mu
    from accelerate.state import AcceleratorState, GradientState
    from safetensors import SafetensorError

    from draftsmith.cli import main

    out, real, seen = tmp_path / "run", mu.safe_save_file, {}

    def full(state_dict, filename, *a, **k):
        if ".tmp-step-0000002" in str(filename):
            seen["before"] = snapshot(out / "step-0000001")
            raise SafetensorError(
                f"Error while serializing: I/O error: No space left on device (os error 28) at path {filename!r}"
            )
        return real(state_dict, filename, *a, **k)

    monkeypatch.setattr(mu, "safe_save_file", full)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    capsys.readouterr()
    try:
        rc = main(["train", str(TINY / "draft_lm.yaml"), "--output-dir", str(out), *QUICK, "--optim.max_steps=3",
                   "--checkpoint.save_every=1"])  # fmt: skip
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    err = capsys.readouterr().err
    assert seen, "the weights writer was never reached"
    assert_one_clear_line(
        rc, err, f"disk full while writing checkpoint step-0000002 (No space left on device) at {out};"
    )
    assert f"{out / 'step-0000001'} is intact" in err
    assert snapshot(out / "step-0000001") == seen["before"]
    assert not list(out.glob(".tmp-*")) and not (out / "step-0000002").exists()


def _engine(monkeypatch=None, **config):
    from draftsmith.infer.engine import Engine
    from draftsmith.models import Target

    target = Target.load("tiny-random", dtype="float32", device="cpu", compile=False)
    for key, value in config.items():
        monkeypatch.setattr(target.config, key, value)
    return target, Engine(target)


def test_engine_generate_refuses_what_the_cli_refuses(tiny_cache, monkeypatch):
    import torch

    from draftsmith.errors import DraftsmithError
    from draftsmith.infer.engine import Engine

    target, engine = _engine(monkeypatch, max_position_embeddings=64)
    V = target.vocab_size
    # The CLI's words: prompt + max_new_tokens over the target's positions.
    too_long = (
        r"prompt given has 60 tokens; with --max-new-tokens 8 it needs 68 positions, but tiny-random has 64 "
        r"\(max_position_embeddings\)"
    )
    with pytest.raises(DraftsmithError, match=too_long):
        engine.generate(list(range(1, 61)), 8)
    with pytest.raises(DraftsmithError, match=r"takes token ids \(a list of ints or a 1-D/1xN LongTensor; encode text"):
        engine.generate("Hi there", 4)
    with pytest.raises(DraftsmithError, match="got a torch.float32 tensor"):
        engine.generate(torch.ones(3), 4)
    with pytest.raises(DraftsmithError, match=r"one prompt .* got a tensor of shape \[2, 3\]"):
        engine.generate(torch.ones(2, 3, dtype=torch.long), 4)
    for bad, at in (([5, -1, 7], 1), ([V], 0)):
        outside = rf"prompt token id {bad[at]} \(position {at}\) is outside the target's vocabulary of {V:,} ids"
        with pytest.raises(DraftsmithError, match=outside):
            engine.generate(bad, 4)
    with pytest.raises(DraftsmithError, match="typical-lossy verification needs a draft"):
        Engine(target, verification="typical-lossy").generate([1, 2, 3], 4)
    # What fits still decodes: ids as a list, a 1-D and a 1xN tensor alike.
    outs = [engine.generate(ids, 4).tokens for ids in ([1, 2, 3], torch.tensor([1, 2, 3]), torch.tensor([[1, 2, 3]]))]
    assert outs[0] == outs[1] == outs[2] and len(outs[0]) >= 1


@pytest.mark.parametrize(
    "kwargs, line",
    [
        ({"temperature": "hot"}, "temperature must be a finite number >= 0 (0 = greedy), got 'hot'"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0 (0 = greedy), got nan"),
        ({"temperature": -0.5}, "temperature must be a finite number >= 0 (0 = greedy), got -0.5"),
        ({"top_p": float("nan")}, "top_p must be a number in (0, 1] (1 = off), got nan"),
        ({"top_p": "0.9"}, "top_p must be a number in (0, 1] (1 = off), got '0.9'"),
        ({"top_k": 2.5}, "top_k must be an int >= 0 (0 = off), got 2.5"),
        ({"top_k": True}, "top_k must be an int >= 0 (0 = off), got True"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else "",
)
def test_sampling_config_refuses_what_it_cannot_sample_with(kwargs, line):
    from draftsmith.infer.sampling import SamplingConfig

    with pytest.raises(ValueError) as e:
        SamplingConfig(**kwargs)
    assert str(e.value) == line
    assert SamplingConfig(0.7, 5, 0.9).top_k == 5  # in range: accepted


def test_python_api_refuses_a_name_where_a_loaded_object_goes(tiny_cache):
    """load_drafter and Engine take loaded objects: a name or None in their place is one line."""
    from draftsmith.errors import DraftsmithError
    from draftsmith.infer.engine import Engine
    from draftsmith.models import Target, load_drafter

    target = Target.load("tiny-random", dtype="float32", device="cpu", compile=False)
    cases = (
        (lambda: load_drafter("truncated:2", "tiny-random"), "load_drafter: the target must be a loaded Target"),
        (lambda: load_drafter(None, target), "load_drafter: name the drafter (a checkpoint folder, a model name"),
        (lambda: Engine(target, "runs/x/final"), "Engine: the drafter must be a loaded drafter"),
    )
    for call, line in cases:
        with pytest.raises(DraftsmithError) as e:
            call()
        assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)
    assert load_drafter("truncated:2", target).kind == "draft_lm"  # the right objects still load


def test_load_drafter_warns_naming_both_targets(trained_run, tmp_path, caplog, fresh_accelerate):
    """A checkpoint trained against another target loads (lossless), with a warning naming both."""
    import logging

    from draftsmith.models import Target, load_drafter

    ckpt = tmp_path / "other-target"
    shutil.copytree(trained_run / "final", ckpt)
    edit_json("drafter.json", target="qwen2.5-coder-1.5b-instruct")(ckpt)
    target = Target.load("tiny-random", dtype="float32", device="cpu", compile=False)
    with caplog.at_level(logging.WARNING):
        drafter = load_drafter(str(ckpt), target)
    assert f"{ckpt} was trained against qwen2.5-coder-1.5b-instruct; decoding with target tiny-random" in caplog.text
    assert drafter.target is target
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_drafter(str(trained_run / "final"), target)  # its own target: nothing to say
    assert "was trained against" not in caplog.text
