"""Atomic, resumable checkpoints, and one training run per output directory.

Layout of an output directory:

    recipe.yaml            the recipe of the run that holds the folder (written once every check passed)
    step-0000200/          a complete checkpoint: a loadable drafter at the top level (config,
                           weights, tokenizer, drafter.json) + training_state/ (accelerate's
                           save_state: model, optimizer, scheduler, RNG of every rank) +
                           trainer_state.json (step, epoch, data position), written last
    final/                 the drafter after the last step (no training state)
    best/                  the drafter with the highest τ measured through the runtime so far (ties:
                           the later step); its drafter.json carries step, tau and the prompts
    curves.png             loss and τ against tokens seen (written at the end of the run)
    .tmp-step-0000200/     a checkpoint being written; never read, deleted on the next start
    .old-step-0000200/     a checkpoint being replaced by a re-save of the same step; restored on
                           the next start if the new one never got its name
    .draftsmith-train.lock held (flock) by the run writing here; see _RunLock

Every rank writes into the temp folder, then the main process checks it (weights whole,
trainer state readable) and renames it: a kill at any moment leaves either the previous
checkpoints or the new complete one, never a half-written folder under a real name (rename
within one filesystem is atomic on POSIX). Old checkpoints are pruned only after that check,
and only intact ones count towards keep_last. The trainer state and recipe.yaml are written with
draftsmith/fileio.py's atomic writes; the folders' renames are this module's own.

The training loop sees one object, `RunFolder`, and calls it once per event, on every rank:
`lock` (one run per folder), `resume` (back to where a killed run stopped, or a fresh start;
the run's first writes), `save` (a periodic, SIGTERM or end-of-run checkpoint, final/ at the end),
`keep_if_best` (best/) and `close`. The module's functions are the steps behind those events;
`draftsmith train` runs the read-only checks (`check_output_dir`, `plan_resume`) before torch loads.
"""

from __future__ import annotations

import fcntl  # POSIX file locks: draftsmith trains on Linux/macOS
import json
import logging
import math
import os
import pathlib
import shutil
import socket
import sys
import time

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import io_error, write_atomic
from draftsmith.train.trainer import faults

log = logging.getLogger("draftsmith.train")

TRAINER_STATE = "trainer_state.json"
TRAINING_STATE_DIR = "training_state"
PREFIX = "step-"
LOCK_NAME = ".draftsmith-train.lock"
STATE_KEYS = ("step", "epoch", "batch_in_epoch")
BEST = "best"


def _step_dir(root: pathlib.Path, step: int) -> pathlib.Path:
    return root / f"{PREFIX}{step:07d}"


def complete_checkpoints(root: pathlib.Path) -> list[pathlib.Path]:
    """Complete step-* folders (their trainer state, written last, is there), oldest first."""
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir()
        and p.name.startswith(PREFIX)
        and p.name[len(PREFIX) :].isdigit()
        and (p / TRAINER_STATE).is_file()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(root: pathlib.Path) -> pathlib.Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def resume_hint(root: pathlib.Path) -> str:
    """What a run stopped by a lost process does next: --resume from the latest checkpoint, or rerun."""
    latest = latest_checkpoint(root)
    if latest:
        return f"Every checkpoint in {root} is complete: --resume continues from {latest.name}"
    return f"No checkpoint in {root} yet: rerun to start again"


# --- the events the training loop calls ------------------------------------------------------------


class RunFolder:
    """One training run's output directory, as the loop sees it. Built before the accelerator, it
    runs the checks that need no model (every rank alike; it reads only, so a refused run leaves
    the folder as it was); then one call per event, on every rank (the writes are collective, the
    main process writes the shared files): lock, resume, save, keep_if_best, close."""

    def __init__(self, root: pathlib.Path, kind: str, resume: bool, keep_last: int):
        self.root, self.kind, self.resuming, self.keep_last = root, kind, resume, keep_last
        check_output_dir(root)
        plan_resume(root, kind, resume)
        self.best: dict | None = None  # {"step", "tau", "se", "tokens", "why"} of the checkpoint in best/
        self._acc = self._lock = self._plan = None
        self._wrote = False  # until resume's first write: closing then removes a folder this run created
        self._damaged: set[str] = set()  # damaged checkpoints already named in a warning
        self.meta: dict = {}  # recorded in every checkpoint's drafter.json (the chat template's switches)

    def lock(self, accelerator) -> None:
        """Take the folder for this run (one run per output dir, see _RunLock), then check its
        checkpoints again under the lock: another run may have written some since."""
        self._acc = accelerator
        self._lock = _RunLock(self.root)
        self._lock.acquire_on_all_ranks(accelerator)
        try:
            self._plan = plan_resume(self.root, self.kind, self.resuming)
        except BaseException:
            self.close()
            raise

    def resume(self, recipe_text: str) -> dict | None:
        """After a kill (call it once the model, optimizer and scheduler are prepared): with
        --resume and a checkpoint, accelerate's training state (model, optimizer, scheduler, every
        rank's RNG) and the best-τ record come back -> the checkpoint's trainer state (step, epoch,
        data position, tokens, history, train time); None for a fresh start. Then the run's first
        writes: what a run killed while saving left is cleaned up, and recipe.yaml (atomically: a
        kill leaves the old or the new one) says what this run trains."""
        state = self._load() if self.resuming else None
        self._wrote = True
        if self._acc.is_main_process:
            cleaned = remove_partial(self.root)
            if cleaned:
                log.info("cleaned up after a run killed while saving: %s", ", ".join(cleaned))
            write_atomic(self.root / "recipe.yaml", recipe_text, sync=True)
        self._acc.wait_for_everyone()
        return state

    def _load(self) -> dict | None:
        if self._plan is None:
            log.info("--resume: no checkpoint in %s yet, starting from step 0", self.root)
            return None
        ckpt, state = self._plan
        try:
            self._acc.load_state(str(ckpt / TRAINING_STATE_DIR))
        except Exception as e:  # noqa: BLE001 -- torch.load/safetensors raise many types on a damaged file
            raise DraftsmithError(
                f"{ckpt}: corrupt training state ({type(e).__name__}: {str(e)[:200]}); delete it to resume from the "
                "one before"
            ) from None
        self.best = restore_best(self.root, state.get("best"))
        if state.get("world_size") not in (None, self._acc.num_processes):
            log.warning(
                "resuming with %d processes, checkpoint was written by %s: the data order changes",
                self._acc.num_processes,
                state["world_size"],
            )
        log.info("resumed from %s (step %d, epoch %d)", ckpt.name, state["step"], state["epoch"])
        return state

    def save(self, task, model, position: dict, eval_metrics: dict, final: dict | None = None) -> pathlib.Path:
        """A resumable checkpoint (periodic, on SIGTERM, at the end of the run) of the step in
        `position`, the trainer state a resume continues from (step, epoch, batch_in_epoch, tokens,
        world_size, history, train_seconds; the best-τ record is added here, so a resumed run never
        replaces a better best/ with a worse one); then the older ones pruned to keep_last. With
        `final` (the end of the run: the measured τ and its prompts, or {}), final/ too.
        -> the folder written last."""
        extra = {"step": position["step"], "eval": eval_metrics, **self.meta}
        trainer_state = {**position, "best": self.best}
        written = save(
            self._acc, task, model, self.root, _step_dir(self.root, position["step"]).name, trainer_state, extra
        )
        if self._acc.is_main_process:
            for ckpt in _prune(self.root, self.keep_last):
                if ckpt.name not in self._damaged:
                    self._damaged.add(ckpt.name)
                    log.warning(
                        "%s is damaged (%s): kept, but not counted in checkpoint.keep_last; delete it if "
                        "you do not need it",
                        ckpt,
                        verify(ckpt)[0],
                    )
        if final is not None:
            written = save(self._acc, task, model, self.root, "final", None, extra | {"checkpoint": "final"} | final)
        return written

    def keep_if_best(
        self,
        task,
        model,
        tau: float | None,
        position: dict,
        eval_metrics: dict,
        acceptance: dict,
        se: float | None = None,
    ) -> None:
        """best/ when this step's τ, measured through the runtime, beats best/'s by more than twice
        the standard error of their difference (each τ's error from its prompts, `se`): τ on a few
        prompts is noisy, and a noisy maximum would pick a checkpoint by chance. The first
        measurement (step 0 where the run measures it) is best/ to begin with. Without standard
        errors (a single prompt) the higher τ wins, ties to the later step. τ peaks while the loss
        keeps falling, so the loss cannot choose. The main process measured (`tau`; None: not
        measured), so it decides for every rank; `acceptance` says which prompts τ was measured on;
        best/'s record says why it was kept."""
        if self._acc.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            tau, se = broadcast_object_list([tau, se], from_process=0)
        if tau is None:
            return
        step, why = position["step"], "the first measurement"
        if self.best is not None:
            best, best_se = self.best["tau"], self.best.get("se")
            if _finite(se) and _finite(best_se):
                margin = 2 * math.hypot(se, best_se)
                if tau - best <= margin:
                    if self._acc.is_main_process:
                        log.info(
                            "τ %.3f ± %.3f at step %d is within the noise of best/'s %.3f ± %.3f (step %d): "
                            "best/ stays",
                            tau, se, step, best, best_se, self.best["step"],
                        )  # fmt: skip
                    return
                why = (
                    f"τ {tau:.3f} ± {se:.3f} beat step {self.best['step']}'s {best:.3f} ± {best_se:.3f} by more "
                    f"than {margin:.3f} (2 standard errors of the difference)"
                )
            elif tau < best:
                return
            else:
                why = f"τ {tau:.3f} >= step {self.best['step']}'s {best:.3f} (no standard error to test against)"
        self.best = {"step": step, "tau": tau, "se": se, "tokens": position["tokens"], "why": why}
        extra = {
            "step": step,
            "eval": eval_metrics,
            "checkpoint": BEST,
            "tau": tau,
            "tau_se": se,
            "acceptance": acceptance,
        }
        save(self._acc, task, model, self.root, BEST, None, extra)
        if self._acc.is_main_process:
            log.info("best/ is step %d (%s), written to %s", step, why, self.root / BEST)

    def close(self) -> None:
        """Release the folder (the process's exit releases it too); a run that wrote nothing removes
        the folder if it created it."""
        if self._lock is not None:
            self._lock.release(discard=not self._wrote)


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


# --- before anything is written ------------------------------------------------------------------


def check_output_dir(root: pathlib.Path) -> None:
    """One clear line for an output dir that cannot be used: a file, under a file, or read-only.
    (os.access cannot see every refusal, e.g. root on a read-only mount: _RunLock.acquire, the
    first write, turns those into one line too.)"""
    if root.exists() and not root.is_dir():
        raise DraftsmithError(f"output dir {root} is a file, not a folder: choose another --output-dir")
    parent = root
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DraftsmithError(f"output dir {root} cannot be created: {parent} is a file; choose another --output-dir")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DraftsmithError(
            f"output dir {root} cannot be written: {parent} is read-only for this user; choose another --output-dir"
        )


def plan_resume(root: pathlib.Path, kind: str, resume: bool) -> tuple[pathlib.Path, dict] | None:
    """(the checkpoint to resume from, its trainer state), None for a fresh start; a
    DraftsmithError when the folder's checkpoints cannot be used. Reads only: run it before
    anything is written, so a refused run leaves the folder as it was."""
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        return None
    if not resume:
        raise DraftsmithError(f"{root} already holds checkpoints: pass --resume to continue, or another --output-dir")
    state = _read_trainer_state(ckpt, kind)
    if not (ckpt / TRAINING_STATE_DIR).is_dir():
        raise DraftsmithError(
            f"{ckpt}: corrupt checkpoint (no {TRAINING_STATE_DIR}/); delete {ckpt} to resume from the one before"
        )
    return ckpt, state


def _read_trainer_state(ckpt: pathlib.Path, kind: str) -> dict:
    """The trainer state of `ckpt`, checked to belong to a drafter of `kind` and to say where
    training stopped."""
    from draftsmith.models import read_drafter_meta  # here: the checks before training stay free of torch

    meta = read_drafter_meta(ckpt)
    if meta is None:
        raise DraftsmithError(f"{ckpt}: not a draftsmith checkpoint (no drafter.json)")
    if meta["kind"] != kind:
        raise DraftsmithError(
            f"{ckpt}: a {meta['kind']!r} checkpoint; this recipe trains a {kind!r} drafter (use another --output-dir)"
        )
    try:
        state = json.loads((ckpt / TRAINER_STATE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftsmithError(
            f"{ckpt / TRAINER_STATE}: corrupt checkpoint ({e}); delete {ckpt} to resume from the one before"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(state.get(k), int) for k in STATE_KEYS):
        raise DraftsmithError(
            f"{ckpt / TRAINER_STATE}: corrupt checkpoint (no {'/'.join(STATE_KEYS)}); delete {ckpt} "
            "to resume from the one before"
        )
    return state


class _RunLock:
    """One training run per output dir: an exclusive flock(2) on OUT/.draftsmith-train.lock,
    held for as long as the process lives. The kernel drops it when the process dies, kill -9
    included, so a crashed run never leaves a stale lock behind (the file stays; its content
    only names the last holder, for the message a refused run prints). flock works across
    processes of one machine and, on Linux, over NFS (emulated with POSIX byte-range locks).

    Under accelerate only the main process (global rank 0) takes it: the other ranks of the same
    launch share the folder legitimately and learn the outcome from rank 0 (the trainer
    broadcasts it), so every rank of a refused launch stops with the same line."""

    def __init__(self, root: pathlib.Path):
        self.root, self.path = root, root / LOCK_NAME
        self._fd: int | None = None
        self.created_dir = False

    def acquire(self) -> str | None:
        """Take the lock: None when held now, else the one-line reason it cannot be."""
        try:
            self.created_dir = not self.root.exists()
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            return f"output dir {self.root} cannot be written ({e.strerror or e}): choose another --output-dir"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            return (
                f"output dir {self.root} is in use by another training run ({holder}): wait for it to finish, "
                "or choose another --output-dir"
            )
        os.ftruncate(fd, 0)
        os.write(
            fd,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "argv": sys.argv,
                }
            ).encode(),
        )
        self._fd = fd
        return None

    def acquire_on_all_ranks(self, accelerator) -> None:
        """The main process takes the lock; every rank learns the outcome, so a refused launch
        stops on every rank with the same line (no rank left waiting at a barrier)."""
        reason = self.acquire() if accelerator.is_main_process else None
        if accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            reason = broadcast_object_list([reason], from_process=0)[0]
        if reason is not None:
            raise DraftsmithError(reason)

    def release(self, discard: bool = False) -> None:
        """Drop the lock; `discard`: the run wrote nothing, so remove the folder too if this run
        created it and it holds only the lock file."""
        if self._fd is None:
            return
        if discard and self.created_dir:
            self.path.unlink(missing_ok=True)  # before unlocking: no one can be waiting on this file yet
            try:
                self.root.rmdir()
            except OSError:
                pass  # something else appeared in it: leave it
        os.close(self._fd)
        self._fd = None


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 65536, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file names no process"


# --- writing and cleaning up -----------------------------------------------------------------------


def remove_partial(root: pathlib.Path) -> list[str]:
    """Clean up after a run killed while saving (main process only): temp folders go; a
    checkpoint that was being replaced comes back if its replacement never got the name."""
    done = []
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if p.is_dir() and p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed {p.name}")
            elif p.is_dir() and p.name.startswith(".old-"):
                real = root / p.name[len(".old-") :]
                if real.exists():
                    shutil.rmtree(p, ignore_errors=True)
                    done.append(f"removed {p.name}")
                else:
                    os.replace(p, real)
                    done.append(f"restored {real.name}")
    return done


def verify(folder: pathlib.Path, resumable: bool = True) -> list[str]:
    """What is missing or damaged in checkpoint `folder` ([] = intact): drafter.json, config.json,
    every safetensors file whole (headers only), and for a resumable one the trainer state and
    accelerate's training state."""
    from draftsmith.models import read_drafter_meta
    from draftsmith.models.weights import check_safetensors, check_weights

    problems = []
    try:
        if read_drafter_meta(folder) is None:
            problems.append("no drafter.json")
    except DraftsmithError as e:
        problems.append(str(e))
    if not (folder / "config.json").is_file():
        problems.append("no config.json")
    try:
        check_weights(folder, skip=(TRAINING_STATE_DIR,))
    except DraftsmithError as e:
        problems.append(str(e))
    if resumable:
        state_dir = folder / TRAINING_STATE_DIR
        if not state_dir.is_dir() or not any(state_dir.iterdir()):
            problems.append(f"no {TRAINING_STATE_DIR}/")
        else:
            for f in sorted(state_dir.rglob("*.safetensors")):
                try:
                    check_safetensors(f)
                except DraftsmithError as e:
                    problems.append(str(e))
        try:
            state = json.loads((folder / TRAINER_STATE).read_text())
            if not all(isinstance(state.get(k), int) for k in STATE_KEYS):
                problems.append(f"{TRAINER_STATE} lacks {'/'.join(STATE_KEYS)}")
        except (OSError, ValueError, AttributeError) as e:
            problems.append(f"{TRAINER_STATE} unreadable ({type(e).__name__})")
    return problems


def save(
    accelerator, task, model, root: pathlib.Path, name: str, trainer_state: dict | None, extra: dict
) -> pathlib.Path:
    """Write checkpoint `root/name` atomically; with `trainer_state`, also the resumable training
    state. Every rank must call this (DeepSpeed writes per-rank shards, ZeRO-3 gathers weights).
    A write that fails (a full disk, a kill) leaves no partial folder behind: the earlier
    checkpoints are all there is, intact and resumable."""
    tmp = root / f".tmp-{name}"
    try:
        return _save(accelerator, task, model, root, name, trainer_state, extra)
    except BaseException as e:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)  # frees what a full disk let it write
        failed = io_error(e)
        if failed is None:
            raise
        prev = latest_checkpoint(root)
        then = f"{prev} is intact: free space, then --resume" if prev else "free space and rerun"
        raise DraftsmithError(f"{faults.write_failure(failed, f'checkpoint {name}', root)}; {then}") from None


def _save(accelerator, task, model, root: pathlib.Path, name: str, trainer_state: dict | None, extra: dict):
    final = root / name
    tmp = root / f".tmp-{name}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    if trainer_state is not None:
        accelerator.save_state(str(tmp / TRAINING_STATE_DIR))
    state_dict = accelerator.get_state_dict(model)  # collective under ZeRO-3: all ranks
    # every rank writes its own RNG state (and DeepSpeed its shards) into tmp: none may be
    # renamed away under a rank that is still writing
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        task.save(accelerator.unwrap_model(model), state_dict, tmp, extra)
        if trainer_state is not None:
            write_atomic(tmp / TRAINER_STATE, json.dumps(trainer_state, indent=2), sync=True)
        problems = verify(tmp, resumable=trainer_state is not None)
        if problems:  # never give a damaged checkpoint a real name (nor prune for it)
            raise DraftsmithError(
                f"checkpoint {name} came out incomplete ({problems[0]}); the earlier checkpoints in {root} "
                "are kept: check the disk (full?) and --resume"
            )
        if final.exists():  # re-saving the same step after a resume: keep the old one until the new one has its name
            old = root / f".old-{name}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
        # one line per checkpoint over all machines: the multi-machine test counts them
        log.info(
            "checkpoint %s written by process %d of %d",
            name,
            getattr(accelerator, "process_index", 0),
            getattr(accelerator, "num_processes", 1),
        )
    accelerator.wait_for_everyone()
    return final


def warm_imports() -> None:
    """Import what writing a checkpoint imports: transformers' save_pretrained unwraps the model
    through accelerate, which imports deepspeed whenever it is installed (9 s on a busy 2-core
    machine). Every run saves at least once, so this moves the cost, not adds it: a SIGTERM
    before the run's first checkpoint then spends its grace period on the checkpoint alone."""
    from accelerate.utils import is_deepspeed_available

    if is_deepspeed_available():
        import deepspeed  # noqa: F401


def _prune(root: pathlib.Path, keep_last: int) -> list[pathlib.Path]:
    """Delete intact step-* checkpoints older than the newest `keep_last` intact ones. Damaged
    ones (weights missing, say) are neither counted nor deleted: a damaged newer checkpoint
    must not push out an intact older one. -> the damaged ones."""
    intact, damaged = [], []
    for ckpt in complete_checkpoints(root):
        (damaged if verify(ckpt) else intact).append(ckpt)
    for old in intact[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return damaged


def restore_best(root: pathlib.Path, recorded: dict | None) -> dict | None:
    """The best-τ record a resumed run compares against: the run state's (`recorded`), unless
    best/ on disk says otherwise. A best/ written after the resumed checkpoint (a kill between
    the two) has the higher claim: it is what a worse τ would overwrite. No intact best/ on disk:
    None, so the resumed run writes one again."""
    from draftsmith.models import read_drafter_meta

    folder = root / BEST
    try:
        meta = read_drafter_meta(folder) if folder.is_dir() else None
    except DraftsmithError:
        meta = None
    if meta is None or not isinstance(meta.get("tau"), (int, float)) or verify(folder, resumable=False):
        if recorded:
            log.warning("%s is missing or damaged: the best checkpoint is chosen again from here on", folder)
        return None
    on_disk = {"step": meta.get("step"), "tau": float(meta["tau"]), "tokens": (recorded or {}).get("tokens")}
    if recorded and on_disk["step"] == recorded.get("step"):
        return recorded
    return on_disk if not recorded or on_disk["tau"] >= recorded["tau"] else recorded


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "BEST",
    "RunFolder",
    "check_output_dir",
    "complete_checkpoints",
    "latest_checkpoint",
    "plan_resume",
    "remove_partial",
    "restore_best",
    "resume_hint",
    "save",
    "verify",
    "warm_imports",
]
