"""Atomic, resumable checkpoints.

Layout of an output directory:

    step-0000200/          a complete checkpoint: a loadable drafter at the top level (config,
                           weights, tokenizer, drafter.json) + training_state/ (accelerate's
                           save_state: model, optimizer, scheduler, RNG of every rank) +
                           trainer_state.json (step, epoch, data position), written last
    final/                 the drafter after the last step (no training state)
    .tmp-step-0000200/     a checkpoint being written; never read, deleted on the next start

Every rank writes into the temp folder, then the main process renames it: a kill at any moment
leaves either the previous checkpoints or the new complete one, never a half-written folder
under a real name (rename within one filesystem is atomic on POSIX).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

from draftsmith.errors import DraftsmithError
from draftsmith.models import read_drafter_meta

TRAINER_STATE = "trainer_state.json"
TRAINING_STATE_DIR = "training_state"
PREFIX = "step-"


def step_dir(root: pathlib.Path, step: int) -> pathlib.Path:
    return root / f"{PREFIX}{step:07d}"


def complete_checkpoints(root: pathlib.Path) -> list[pathlib.Path]:
    """Complete step-* folders, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / TRAINER_STATE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def latest_checkpoint(root: pathlib.Path) -> pathlib.Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def remove_partial(root: pathlib.Path) -> list[str]:
    """Delete temp folders left by a run killed while saving (main process only)."""
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
    return removed


def read_trainer_state(ckpt: pathlib.Path, kind: str) -> dict:
    """The trainer state of `ckpt`, checked to belong to a drafter of `kind`."""
    meta = read_drafter_meta(ckpt)
    if meta is None:
        raise DraftsmithError(f"{ckpt}: not a draftsmith checkpoint (no drafter.json)")
    if meta["kind"] != kind:
        raise DraftsmithError(f"{ckpt}: a {meta['kind']!r} checkpoint; this recipe trains a {kind!r} drafter (use another --output-dir)")
    try:
        return json.loads((ckpt / TRAINER_STATE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DraftsmithError(f"{ckpt / TRAINER_STATE}: corrupt checkpoint ({e}); delete {ckpt} to resume from the one before") from None


def save(accelerator, task, model, root: pathlib.Path, name: str, trainer_state: dict | None, extra: dict) -> pathlib.Path:
    """Write checkpoint `root/name` atomically; with `trainer_state`, also the resumable training
    state. Every rank must call this (DeepSpeed writes per-rank shards, ZeRO-3 gathers weights)."""
    final = root / name
    tmp = root / f".tmp-{name}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    if trainer_state is not None:
        accelerator.save_state(str(tmp / TRAINING_STATE_DIR))
    state_dict = accelerator.get_state_dict(model)  # collective under ZeRO-3: all ranks
    if accelerator.is_main_process:
        task.save(accelerator.unwrap_model(model), state_dict, tmp, extra)
        if trainer_state is not None:
            _write_synced(tmp / TRAINER_STATE, json.dumps(trainer_state, indent=2))
        if final.exists():  # re-saving the same step after a resume
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    accelerator.wait_for_everyone()
    return final


def prune(root: pathlib.Path, keep_last: int) -> None:
    for old in complete_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def _write_synced(path: pathlib.Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
