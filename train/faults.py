"""Faults of long and multi-process runs, turned into one line each.

- A process of a multi-process run is lost (killed, crashed, its machine gone): the others fail
  at their next collective, at once when its connections close (a kill), or after
  `checkpoint.collective_timeout_s` when it hangs or its machine vanishes without closing them.
  `Heartbeat` names the lost rank: every process bumps a counter in the launch's rendezvous store
  once a second from a daemon thread; the counters that stopped moving are the lost processes
  (a stopped or killed process stops its thread too). The first survivor to look writes its
  finding into the store, so every survivor prints the same line.
- A SIGTERM (SLURM's preemption) during the acceptance measurement: `Preempted` is raised from
  the signal handler and abandons the measurement wherever the decoding loop is (the runtime
  knows nothing of training, so it has no stop flag to check).
- A full disk while a checkpoint is written: `write_failure` names it and the path.
"""

from __future__ import annotations

import datetime
import errno
import logging
import os
import re
import threading
import time

log = logging.getLogger("draftsmith.train")

# What gloo, NCCL and the c10d store say when a peer is gone or silent; anything else is a bug
# of this process and keeps its traceback.
_COMM_FAILURE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|Timed out waiting|wait timeout after|"
    r"socket has timed out|gloo/transport|NCCL communicator was aborted|Connection refused"
)
_KEY = "draftsmith/heartbeat/"
_LOST_KEY = "draftsmith/lost"


class Preempted(Exception):
    """Raised by the SIGTERM handler inside the acceptance measurement to abandon it."""


def is_comm_failure(e: BaseException) -> bool:
    import torch.distributed as dist

    return isinstance(e, dist.DistError) or (isinstance(e, RuntimeError) and bool(_COMM_FAILURE.search(str(e))))


class Heartbeat:
    """A counter per process in the launch's rendezvous store (MASTER_ADDR:MASTER_PORT, set by
    torchrun/accelerate), bumped every `interval` seconds; `lost_ranks` names the ranks whose
    counter stopped. Over a separate store connection: the process group's own is not touched."""

    def __init__(self, rank: int, world: int, interval: float = 1.0):
        self.rank, self.world, self.interval = rank, world, interval
        self._stop = threading.Event()
        self._store = None
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(cls) -> Heartbeat | None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1 or "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            return None
        beat = cls(int(os.environ.get("RANK", "0")), world)
        try:
            beat.start()
        except Exception as e:  # noqa: BLE001 -- naming a lost rank is a courtesy: never fail a run over it
            log.warning("no heartbeat (%s): a lost process will not be named", e)
            return None
        return beat

    def _connect(self):
        import torch.distributed as dist

        return dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=10),
            wait_for_workers=False,
        )

    def start(self) -> None:
        self._store = self._connect()
        self._store.add(_KEY + str(self.rank), 1)
        self._thread = threading.Thread(target=self._beat, name="draftsmith-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._store.add(_KEY + str(self.rank), 1)
            except Exception:  # noqa: BLE001 -- the store went away with its machine: nothing left to tell
                return

    def stop(self) -> None:
        """Stop beating and wait for the thread: a daemon thread still inside a store call when the
        interpreter finalises is unwound through C++ and aborts the process ("terminate called
        without an active exception", SIGABRT) after the run has finished."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=15.0)  # a store call gives up after 10 s

    def _counts(self, store) -> dict[int, int]:
        return {r: store.add(_KEY + str(r), 0) for r in range(self.world) if r != self.rank}

    def lost_ranks(self, wait: float | None = None) -> list[int] | None:
        """The ranks that stopped beating (another survivor's finding if one was written first);
        None when the store cannot be reached (it lives on machine 0, with rank 0)."""
        try:
            store = self._connect()
            found = store.get(_LOST_KEY) if store.check([_LOST_KEY]) else b""
            if not found:
                before = self._counts(store)
                time.sleep(wait if wait is not None else 4 * self.interval)
                after = self._counts(store)
                lost = ",".join(str(r) for r in sorted(before) if after[r] == before[r])
                # the first survivor's finding wins: every survivor prints the same ranks
                found = store.compare_set(_LOST_KEY, "", lost) if lost else b""
            found = found.decode() if isinstance(found, bytes) else found
            return [int(r) for r in found.split(",") if r]
        except Exception:  # noqa: BLE001 -- the store's host is gone
            return None


def lost_process_message(e: BaseException, beat: Heartbeat | None, step: int | None, resume_hint: str) -> str:
    """One line for a collective that failed because another process is gone or silent."""
    world = beat.world if beat else int(os.environ.get("WORLD_SIZE", "1"))
    lost = beat.lost_ranks() if beat else None
    if lost is None:
        who = "process rank 0 (its machine's rendezvous store no longer answers)"
    elif lost:
        who = f"process rank{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))}"
    else:
        who = "another process"
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    why = "did not answer in time" if re.search("timed? ?out", first, re.IGNORECASE) else "was lost"
    at = f" at step {step}" if step is not None else ""
    return f"{who} of {world} {why} ({first[:160]}); this process stopped{at}. {resume_hint}"


def write_failure(e: OSError, what: str, where) -> str:
    """One line for a checkpoint write that failed: a full disk (or quota) named as such."""
    path = e.filename or where
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full while writing {what} ({e.strerror or 'no space left'}) at {path}"
    return f"could not write {what} ({e.strerror or e}) at {path}"
