"""Faults of long and multi-process runs, turned into one line each.

- A process of a multi-process run is lost (killed, crashed, its machine gone): the others fail
  at their next collective, at once when its connections close (a kill), or after
  `checkpoint.collective_timeout_s` when it hangs or its machine vanishes without closing them.
  `Heartbeat` names the lost rank: every process bumps a counter in the launch's rendezvous store
  once a second from a thread of its own; the counters that stopped moving are the lost processes
  (a stopped or killed process stops its thread too). The first survivor to look writes its
  finding into the store, so every survivor prints the same line. A process lost after the
  last collective fails no collective: `Heartbeat.finish` has the survivors wait for every
  process to finish or stop beating, and name the lost one instead of waiting at the launcher's
  exit barrier.
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
_DONE_KEY = "draftsmith/done/"


class Preempted(Exception):
    """Raised by the SIGTERM handler inside the acceptance measurement to abandon it."""


def is_comm_failure(e: BaseException) -> bool:
    import torch.distributed as dist

    return isinstance(e, dist.DistError) or (isinstance(e, RuntimeError) and bool(_COMM_FAILURE.search(str(e))))


class Heartbeat:
    """A counter per process in the launch's rendezvous store (MASTER_ADDR:MASTER_PORT, set by
    torchrun/accelerate), bumped every `interval` seconds; `lost_ranks` names the ranks whose
    counter stopped. Over separate store connections: the process group's own is not touched.

    A c10d store is a C++ object, and a Python thread left inside one of its calls when the
    interpreter finalises is unwound through C++ and aborts the process ("terminate called
    without an active exception", SIGABRT), a finished run included. So the beating thread opens
    its own connection, is the only thread that uses it and closes it before it ends; it is not a
    daemon (the interpreter waits for it before finalising) and it ends by itself once the main
    thread has ended, within `interval` (or one store call), whether `stop` was called or not.
    `lost_ranks` and `finish` use connections of their own, opened and closed in the caller's thread."""

    def __init__(self, rank: int, world: int, interval: float = 1.0):
        self.rank, self.world, self.interval = rank, world, interval
        self._stop = threading.Event()
        self._started = threading.Event()
        self._error: Exception | None = None
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

    def _bump(self, store) -> None:
        store.add(_KEY + str(self.rank), 1)

    def start(self) -> None:
        """Start the thread and wait for its first beat; raises what connecting raised."""
        if self._thread is not None:
            raise RuntimeError("a Heartbeat starts once")
        self._thread = threading.Thread(target=self._run, name="draftsmith-heartbeat", daemon=False)
        self._thread.start()
        self._started.wait()  # set by the thread whatever happens; connecting gives up after 10 s
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        store = None
        try:
            try:
                store = self._connect()
                self._bump(store)
            except Exception as e:  # noqa: BLE001 -- start() raises it in the caller's thread
                self._error = e
                return
            finally:
                self._started.set()
            while not self._stop.wait(self.interval) and threading.main_thread().is_alive():
                try:
                    self._bump(store)
                except Exception:  # noqa: BLE001 -- the store went away with its machine: nothing left to tell
                    return
        finally:
            store = None  # the last reference: the connection closes here, in the thread that used it

    def stop(self) -> None:
        """Stop beating and wait for the thread, its store call and its connection's close."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()  # a store call gives up after 10 s

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

    def finish(self, patience: float | None = None, at_most: float = 300.0) -> list[int]:
        """Mark this process finished, then wait until every other one has finished too or has
        stopped beating for `patience` seconds (default 15 intervals: longer than a store call
        may take): -> the ranks that stopped without finishing. A process lost after the last
        collective fails nothing here, yet its launcher never reaches the launch's exit barrier,
        where the others' launchers would wait for it 300 s; the survivors name it and stop
        instead. One still beating but not finished after `at_most` seconds is left to that
        barrier. Call before `stop`: this process's own counter must keep moving meanwhile."""
        patience = 15 * self.interval if patience is None else patience
        store = None
        try:
            store = self._connect()
            store.set(_DONE_KEY + str(self.rank), "1")
            last = self._counts(store)
            others = [r for r in last if last[r] > 0]  # one that never beat (no heartbeat) cannot be judged
            start = time.monotonic()
            moved = dict.fromkeys(others, start)
            while True:
                waiting = [r for r in others if not store.check([_DONE_KEY + str(r)])]
                if not waiting:
                    return []
                if time.monotonic() - start > at_most:
                    log.warning("process rank(s) %s still running %.0f s after this one finished", waiting, at_most)
                    return []
                counts, now = self._counts(store), time.monotonic()
                moved |= {r: now for r in waiting if counts[r] != last[r]}
                last = counts
                lost = [r for r in waiting if now - moved[r] >= patience]
                if lost:
                    return lost
                time.sleep(self.interval)
        except Exception as e:  # noqa: BLE001 -- the store's host is gone: nothing left to wait for
            log.warning("could not wait for the other processes to finish (%s)", e)
            return []
        finally:
            store = None  # closed in this thread


def lost_at_end_message(lost: list[int], world: int, step: int | None) -> str:
    """One line for processes lost after the last collective (see Heartbeat.finish)."""
    who = f"process rank{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} of {world}"
    at = f" at step {step}" if step is not None else ""
    return (
        f"{who} was lost after the last collective (it stopped beating before it finished); this "
        f"process finished{at} and every checkpoint it wrote is complete"
    )


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
