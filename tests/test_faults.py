"""Faults at scale: a process of a 2-process DDP run killed mid-step, SIGTERM (SLURM's
preemption) inside an evaluation and inside the end-of-run acceptance measurement, and a full
disk while a checkpoint is written. Each stops with one line or a resumable checkpoint, within a
stated time, and a resumed run trains the same losses as an uninterrupted one."""

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_bad_inputs import assert_one_clear_line, snapshot
from test_multinode import _free_port, _launch, losses, two_machines

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny" / "draft_lm.yaml"
# The stated bounds (train/recipe.py, CheckpointConfig): from SIGTERM to the process's exit, and
# from a killed process to the others' exit, on a busy 2-core machine with the tiny recipe.
SIGTERM_BOUND_S = 20.0
LOST_RANK_BOUND_S = 30.0

STEPS = 8
ARGS = [
    # stdlib files: each a whole conversation of one row, so the evaluation spans several batches
    # (the SIGTERM lands inside it) and every row has a reply to train on
    "--data.path=stdlib",
    "--data.max_rows=60",
    "--data.max_length=64",
    "--data.eval_rows=12",
    "--optim.batch_size=4",
    "--logging.progress=false",
    f"--optim.max_steps={STEPS}",
    "--logging.log_every=1",
    "--logging.eval_every=4",
    "--logging.eval_batches=60",
    "--logging.acceptance_prompts=2",
    "--logging.acceptance_max_new_tokens=32",
    "--checkpoint.save_every=100",  # no periodic checkpoint: SIGTERM's is the one to resume from
]

# `python -m draftsmith.train` with one phase made slow (each eval batch, or each drafting step of
# the acceptance measurement, sleeps FAULT_DELAY s) and a marker file touched once it is inside it.
RUNNER = r"""
import os, pathlib, sys, time
from draftsmith.train.trainer import loop as T
phase, marker = os.environ["FAULT_PHASE"], pathlib.Path(os.environ["FAULT_MARKER"])
delay = float(os.environ["FAULT_DELAY"])
setup = T.Trainer._setup
def slow_setup(self, r):
    setup(self, r)
    if phase == "eval":
        loss = self.task.loss
        def slow_loss(model, batch, step=None):
            if step is None:
                marker.touch()
                time.sleep(delay)
            return loss(model, batch, step=step)
        self.task.loss = slow_loss
    else:
        make = self.task.runtime_drafter
        def slow_drafter(model):
            drafter = make(model)
            propose = drafter.propose
            def slow_propose(*a, **k):
                marker.touch()
                time.sleep(delay)
                return propose(*a, **k)
            drafter.propose = slow_propose
            return drafter
        self.task.runtime_drafter = slow_drafter
T.Trainer._setup = slow_setup
from draftsmith.train.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def _env(**extra) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def _train(out: pathlib.Path, *extra: str) -> subprocess.Popen:
    log = open(out.parent / f"{out.name}.log", "a")
    return subprocess.Popen(
        [sys.executable, "-m", "draftsmith.train", str(TINY), "--output-dir", str(out), *ARGS, *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
    )


def _summary(out: pathlib.Path) -> dict:
    return json.loads((out / "train_summary.json").read_text())


def _only_verified_checkpoints(out: pathlib.Path) -> list[str]:
    """The names of the checkpoints in `out`, asserting each is intact and nothing half-written is left."""
    from draftsmith.train.trainer.checkpoint import verify

    assert not list(out.glob(".tmp-*")) and not list(out.glob(".old-*")), sorted(p.name for p in out.iterdir())
    names = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name.startswith(("step-", "final", "best")))
    for name in names:
        assert verify(out / name, resumable=name.startswith("step-")) == [], name
    return names


def _preempt_inside(phase: str, out: pathlib.Path, *extra: str) -> float:
    """Run with `phase` made slow, SIGTERM it once inside; -> seconds from the signal to its exit."""
    marker = out.parent / f"inside-{phase}"
    marker.unlink(missing_ok=True)
    log = out.parent / f"{out.name}-{phase}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(TINY), "--output-dir", str(out), *ARGS, *extra],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=_env(FAULT_PHASE=phase, FAULT_MARKER=str(marker), FAULT_DELAY="1"),
        )
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert proc.poll() is None, f"the run ended before its {phase}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    try:
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
    took = time.monotonic() - t0
    print(f"SIGTERM inside the {phase}: exited {took:.1f} s later")  # the figure the docs quote (pytest -s)
    text = log.read_text()
    assert rc == 143, f"exit status {rc}:\n{text[-3000:]}"
    assert "abandoned" in text and "stopped by SIGTERM" in text, text[-3000:]
    return took


@pytest.fixture(scope="module")
def uninterrupted(tiny_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "ref"
    assert _train(out).wait(timeout=900) == 0, (out.parent / "ref.log").read_text()[-3000:]
    return _summary(out)


def test_sigterm_inside_evaluation_and_final_acceptance_checkpoints_in_time(uninterrupted, tmp_path):
    """Preempted twice (inside the periodic evaluation at step 4, then inside the end-of-run
    acceptance measurement), resumed each time: the losses of the uninterrupted run."""
    from draftsmith.train.trainer.checkpoint import latest_checkpoint

    out = tmp_path / "run"
    took = _preempt_inside("eval", out)
    assert took < SIGTERM_BOUND_S, f"{took:.1f} s from SIGTERM to exit inside an evaluation"
    assert _only_verified_checkpoints(out) == ["step-0000004"]  # the step the evaluation followed

    took = _preempt_inside("acceptance", out, "--resume")
    assert took < SIGTERM_BOUND_S, f"{took:.1f} s from SIGTERM to exit inside the acceptance measurement"
    assert _only_verified_checkpoints(out) == ["step-0000004", "step-0000008"]  # every step trained; no final/ yet
    assert json.loads((latest_checkpoint(out) / "trainer_state.json").read_text())["step"] == STEPS

    assert _train(out, "--resume").wait(timeout=900) == 0, (tmp_path / "run.log").read_text()[-3000:]
    resumed, ref = _summary(out), uninterrupted
    assert sorted(losses(resumed)) == list(range(1, STEPS + 1))
    assert losses(resumed) == pytest.approx(losses(ref), rel=1e-4, abs=1e-5)
    assert resumed["eval"]["eval/loss"] == pytest.approx(ref["eval"]["eval/loss"], rel=1e-4)
    # the abandoned final measurement was taken again, whole, by the resumed run
    assert resumed["acceptance"]["mean_acceptance_length"] == pytest.approx(ref["acceptance"]["mean_acceptance_length"])
    assert "final" in _only_verified_checkpoints(out)


def test_full_disk_while_checkpointing(tiny_cache, tmp_path, monkeypatch, capsys, fresh_accelerate):
    """The optimizer state of step 4's checkpoint meets a full disk part-way: one line naming it
    and the path, exit 2, step 2's checkpoint untouched and resumable."""
    import torch

    from draftsmith.cli import main

    out = tmp_path / "run"
    argv = ["train", str(TINY), "--output-dir", str(out), *ARGS, "--optim.max_steps=6", "--checkpoint.save_every=2"]
    argv += ["--logging.acceptance_prompts=0", "--logging.eval_every=0", "--logging.eval_batches=1"]
    real_save, seen = torch.save, {}

    def full_disk(obj, f, *a, **kw):
        if ".tmp-step-0000004" in str(f) and not seen:
            seen["before"] = snapshot(out / "step-0000002")
            with open(f, "wb") as fh:
                fh.write(b"\0" * 4096)  # what fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", full_disk)
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert seen, "the writer was never reached"
    assert_one_clear_line(
        rc, err, f"disk full while writing checkpoint step-0000004 (No space left on device) at {out}"
    )
    assert f"{out / 'step-0000002'} is intact" in err
    assert _only_verified_checkpoints(out) == ["step-0000002"]
    assert snapshot(out / "step-0000002") == seen["before"]

    monkeypatch.setattr(torch, "save", real_save)  # room again
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    assert main([*argv, "--resume"]) == 0
    s = _summary(out)
    assert s["steps"] == 6 and sorted(losses(s)) == list(range(1, 7))


def _worker(launch: subprocess.Popen) -> int:
    """The training process a machine's `accelerate launch` started (its only child)."""
    pid = launch.pid
    children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").is_dir(), reason="finds the worker through /proc")
def test_a_killed_rank_stops_the_other_with_one_line_then_resume_matches(tiny_target, tmp_path):
    """Two machines (one process each, gloo on 127.0.0.1) as tests/test_multinode.py runs them;
    machine 1's process is SIGKILLed after step 3 (step 2's checkpoint written)."""
    env = {"ACCELERATE_USE_CPU": "1"}
    ref, _ = two_machines("multinode_ddp.yaml", tmp_path / "ref", env)

    out, port = tmp_path / "cut", _free_port()
    logs = [tmp_path / f"killed-machine{r}.log" for r in (0, 1)]  # the resume writes cut-machine*.log
    procs = [_launch("multinode_ddp.yaml", out, r, port, env, log=logs[r]) for r in (0, 1)]
    try:
        deadline = time.monotonic() + 600
        while "\nstep 3 " not in logs[0].read_text():
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(_worker(procs[1]), signal.SIGKILL)
        t0 = time.monotonic()
        rc = procs[0].wait(timeout=300)
        took = time.monotonic() - t0
        print(f"rank 1 SIGKILLed: rank 0 exited {took:.1f} s later")  # the figure the docs quote (pytest -s)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    text = logs[0].read_text()
    assert rc != 0, text[-3000:]
    assert took < LOST_RANK_BOUND_S, f"{took:.1f} s from the kill to the other machine's exit"
    lines = [ln for ln in text.splitlines() if ln.startswith("draftsmith: error:")]
    assert len(lines) == 1 and "process rank 1 of 2 was lost" in lines[0], text[-3000:]
    assert "--resume continues from step-" in lines[0]
    kept = _only_verified_checkpoints(out)
    assert kept and "final" not in kept, kept

    resumed, logs_text = two_machines("multinode_ddp.yaml", out, env, ["--resume"])
    assert "resumed from step-" in logs_text
    assert losses(resumed) == pytest.approx(losses(ref), rel=1e-5)
    assert resumed["param_fingerprints"] == ref["param_fingerprints"]


def test_heartbeat_names_the_process_that_stopped(monkeypatch):
    """Three processes' heartbeats in one store (threads here): the one stopped is named, and a
    second survivor reads the first one's finding rather than its own."""
    import datetime

    import torch.distributed as dist

    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    from draftsmith.train.trainer.faults import Heartbeat, lost_process_message

    beats = [Heartbeat(rank, 3, interval=0.2) for rank in range(3)]
    for b in beats:
        b.start()
    try:
        time.sleep(0.5)
        beats[2].stop()  # rank 2 killed: its counter stops
        # stop() waits for the thread: one left inside a store call at interpreter exit aborts the process
        assert not beats[2]._thread.is_alive()
        assert beats[0].lost_ranks(wait=1.0) == [2]
        line = lost_process_message(RuntimeError("Connection closed by peer [127.0.0.1]:1234"), beats[1], 7, "hint")
        assert line.startswith("process rank 2 of 3 was lost (Connection closed by peer") and "at step 7. hint" in line
    finally:
        for b in beats:
            b.stop()
    del server


class _RecordingStore:
    """A stand-in for the heartbeat's store connection: which thread opens it, calls it and closes it."""

    def __init__(self, log: list, on_add=None):
        self.log, self.on_add = log, on_add
        log.append(("open", threading.current_thread().name))

    def add(self, key, n):
        self.log.append(("add", threading.current_thread().name))
        if self.on_add is not None:
            self.on_add(sum(op == "add" for op, _ in self.log))
        return 1

    def __del__(self):
        self.log.append(("close", threading.current_thread().name))


@pytest.mark.parametrize("stopped", ["between beats", "inside a store call"])
def test_heartbeat_store_lives_and_dies_in_its_thread(monkeypatch, stopped):
    """The heartbeat's store connection is opened, used and closed by its own thread, never by the
    caller's, and stop() returns after the close, wherever the thread was: a c10d store used by
    two threads, or left inside a call at interpreter exit, aborts the process (SIGABRT)."""
    from draftsmith.train.trainer.faults import Heartbeat

    log, beating = [], threading.Event()
    beat = Heartbeat(0, 2, interval=0.01)

    def on_add(n):
        if n == 3:
            beating.set()
            if stopped == "inside a store call":
                beat._stop.wait()  # this call returns only once stop() was asked for

    monkeypatch.setattr(Heartbeat, "_connect", lambda self: _RecordingStore(log, on_add))
    beat.start()
    assert not beat._thread.daemon  # the interpreter waits for it before finalising
    beating.wait()
    beat.stop()
    assert not beat._thread.is_alive()
    assert log[0][0] == "open" and log[-1][0] == "close" and [op for op, _ in log].count("close") == 1, log
    assert {name for _, name in log} == {"draftsmith-heartbeat"}, log


def test_heartbeat_start_raises_what_connecting_raised(monkeypatch):
    from draftsmith.train.trainer.faults import Heartbeat

    def refused(self):
        raise RuntimeError("Connection refused")

    monkeypatch.setattr(Heartbeat, "_connect", refused)
    beat = Heartbeat(1, 2)
    with pytest.raises(RuntimeError, match="Connection refused"):
        beat.start()
    assert not beat._thread.is_alive()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    assert Heartbeat.from_env() is None  # no heartbeat: the run goes on without it


# The main thread ends (no stop()) while the heartbeat's thread is inside a real c10d store call;
# the call returns only once the interpreter has begun to shut down (threading's exit hooks run
# after the main thread has finished, before the interpreter joins the remaining threads).
EXIT_RACE = r"""
import datetime, os, threading
import torch.distributed as dist
from draftsmith.train.trainer.faults import Heartbeat
server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=60))
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(server.port))
inside = threading.Event()
class Beat(Heartbeat):
    def _bump(self, store):
        if self._started.is_set():
            inside.set()
            store.wait(["released"])
            print("store call returned in", threading.current_thread().name, flush=True)
        super()._bump(store)
Beat(0, 2, interval=0.01).start()
inside.wait()
threading._register_atexit(lambda: server.set("released", "1"))
print("main thread done", flush=True)
"""


def test_interpreter_exit_waits_for_the_heartbeats_store_call():
    """A daemon thread inside a store call at interpreter exit aborted a finished rank ('terminate
    called without an active exception', exit -6): the heartbeat's thread is waited for, ends by
    itself once the main thread has, and the process exits 0."""
    out = subprocess.run([sys.executable, "-c", EXIT_RACE], capture_output=True, text=True, timeout=300, env=_env())
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert "terminate called" not in out.stderr
    assert out.stdout.splitlines() == ["main thread done", "store call returned in draftsmith-heartbeat"], out.stdout


def test_a_process_lost_after_the_last_collective_is_named_not_waited_for(monkeypatch):
    """finish(): every process marks itself finished and waits for the others; one that stopped
    beating without finishing (lost after the last collective, where no collective fails) is
    named, instead of the survivors' launchers waiting 300 s for it at their exit barrier."""
    import datetime

    import torch.distributed as dist

    from draftsmith.train.trainer.faults import Heartbeat, lost_at_end_message

    def launch(world):  # a fresh rendezvous store and `world` processes' heartbeats (threads here)
        port = _free_port()
        server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10))
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        beats = [Heartbeat(rank, world, interval=0.05) for rank in range(world)]
        for b in beats:
            b.start()
        return server, beats

    # every process finishes, in whatever order they get there: none is named
    server, beats = launch(3)
    found = {}
    try:
        finishers = [
            threading.Thread(target=lambda r=r: found.update({r: beats[r].finish(patience=60.0)})) for r in (1, 2)
        ]
        for t in finishers:
            t.start()
        found[0] = beats[0].finish(patience=60.0)
        for t in finishers:
            t.join()
    finally:
        for b in beats:
            b.stop()
    assert found == {0: [], 1: [], 2: []}
    del server

    # rank 1 lost after the last collective (it stops beating and never finishes): rank 0 names it
    server, beats = launch(2)
    try:
        beats[1].stop()
        assert beats[0].finish(patience=0.5) == [1]
    finally:
        for b in beats:
            b.stop()
    del server
    line = lost_at_end_message([1], 3, 6)
    assert line.startswith("process rank 1 of 3 was lost after the last collective") and "at step 6" in line


def test_train_stops_with_one_line_when_a_process_is_lost_at_the_end(monkeypatch):
    """train() asks the heartbeat whether every process finished before it returns: a lost one is
    one DraftsmithError line, and the heartbeat is stopped either way; tqdm starts no monitor thread."""
    import tqdm

    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import load_recipe
    from draftsmith.train.trainer import loop as T

    calls = []

    class Beat:
        world = 2

        def finish(self):
            calls.append("finish")
            return [1]

        def stop(self):
            calls.append("stop")

    class Finished:  # a run whose training returned on this process
        step = 6

        def __init__(self, recipe, resume=None, data=None):
            pass

        def train(self):
            calls.append("train")
            return {"steps": 6}

        def close(self):
            calls.append("close")

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", tqdm.tqdm.monitor_interval)  # restored afterwards
    monkeypatch.setattr(T.faults.Heartbeat, "from_env", classmethod(lambda cls: Beat()))
    monkeypatch.setattr(T, "Trainer", Finished)
    monkeypatch.setattr(T, "shutdown", lambda: calls.append("shutdown"))
    with pytest.raises(DraftsmithError, match=r"^process rank 1 of 2 was lost after the last collective") as e:
        T.train(load_recipe(TINY, []))
    assert "at step 6" in str(e.value) and "\n" not in str(e.value)
    assert calls == ["train", "close", "finish", "stop", "shutdown"]
    assert tqdm.tqdm.monitor_interval == 0


def test_collective_timeout_reaches_the_process_group(monkeypatch):
    """checkpoint.collective_timeout_s is what gloo gets, 600 s included (accelerate's to_kwargs
    would drop a value equal to its NCCL default and leave gloo its own 1800 s)."""
    import datetime

    import accelerate

    from draftsmith.train.config import load_recipe
    from draftsmith.train.distributed import make_accelerator

    class Built(Exception):
        pass

    def accelerator(**kw):  # records what the trainer's Accelerator would be built with
        seen.update(kw)
        raise Built

    seen = {}
    monkeypatch.setattr(accelerate, "Accelerator", accelerator)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for seconds in (600.0, 42.0):
        seen.clear()
        with pytest.raises(Built):
            make_accelerator(load_recipe(TINY, [f"--checkpoint.collective_timeout_s={seconds}"]))
        (group,) = seen["kwargs_handlers"]
        assert group.to_kwargs() == {"timeout": datetime.timedelta(seconds=seconds), "backend": "gloo"}


@pytest.mark.slow  # waits out a 60 s timeout by design
@pytest.mark.skipif(not pathlib.Path("/proc/self/task").is_dir(), reason="finds the worker through /proc")
def test_a_hung_rank_stops_the_other_after_the_collective_timeout(tiny_target, tmp_path):
    """Machine 1's process frozen (SIGSTOP: alive, connections open, silent, as a hung node): gloo
    would wait 30 minutes; checkpoint.collective_timeout_s=60 stops machine 0 with one line. (The
    timeout also bounds how long the processes wait for each other to join at the start: 10 s was
    too short for two processes starting on a busy 2-core machine.)"""
    timeout_s = 60
    out, port = tmp_path / "hung", _free_port()
    logs = [tmp_path / f"hung-machine{r}.log" for r in (0, 1)]
    extra = [f"--checkpoint.collective_timeout_s={timeout_s}", "--optim.max_steps=4"]
    procs = [
        _launch("multinode_ddp.yaml", out, r, port, {"ACCELERATE_USE_CPU": "1"}, extra, log=logs[r]) for r in (0, 1)
    ]
    worker = None
    try:
        deadline = time.monotonic() + 600
        while "\nstep 3 " not in logs[0].read_text():
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        worker = _worker(procs[1])
        os.kill(worker, signal.SIGSTOP)
        t0 = time.monotonic()
        rc = procs[0].wait(timeout=300)
        took = time.monotonic() - t0
        print(f"rank 1 SIGSTOPped: rank 0 exited {took:.1f} s later (collective timeout {timeout_s} s)")
    finally:
        if worker is not None:
            os.kill(worker, signal.SIGKILL)
        for p in procs:
            p.kill()
            p.wait()
    text = logs[0].read_text()
    assert rc != 0, text[-3000:]
    assert timeout_s <= took < timeout_s + LOST_RANK_BOUND_S, f"{took:.1f} s from the freeze to machine 0's exit"
    lines = [ln for ln in text.splitlines() if ln.startswith("draftsmith: error:")]
    assert len(lines) == 1 and "process rank 1 of 2 did not answer in time" in lines[0], text[-3000:]
    _only_verified_checkpoints(out)


def test_one_ranks_sigterm_stops_every_rank():
    """The ranks agree on a stop (saving is collective), and a rank that learned of it from
    another skips what follows as if it had been signalled itself (the main process's acceptance
    measurement, which the others wait for at a barrier)."""
    import types

    import torch

    from draftsmith.train.trainer.loop import Trainer

    other_rank_signalled = torch.tensor([1.0, 0.0])
    acc = types.SimpleNamespace(num_processes=2, device="cpu", reduce=lambda t, reduction: t + other_rank_signalled)
    trainer = Trainer.__new__(Trainer)  # no run: only the agreement is under test
    trainer.acc, trainer._terminate = acc, False
    assert trainer._stop_requested() == (True, False)
    assert trainer._terminate
    other_rank_signalled.zero_()
    trainer._terminate = False
    assert trainer._stop_requested() == (False, False) and not trainer._terminate


@pytest.mark.parametrize(
    "message, lost",
    [
        ("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:6020. This is typically ...", True),
        ("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 60000ms for recv operation to complete", True),
        ("wait timeout after 10000ms, keys: /default_pg/0//cpu//0/0", True),  # a process never joined
        ("the regeneration endpoint request timed out", False),  # this process's own problem: its traceback stays
        ("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x8)", False),
    ],
)
def test_a_lost_process_is_told_from_a_bug(message, lost):
    import torch.distributed as dist

    from draftsmith.train.trainer.faults import is_comm_failure

    assert is_comm_failure(RuntimeError(message)) is lost
    assert is_comm_failure(dist.DistNetworkError("anything"))


def test_what_a_checkpoint_imports_is_imported_before_training():
    """transformers' save_pretrained imports deepspeed (through accelerate) when it is installed:
    seconds a SIGTERM before the first checkpoint would otherwise spend inside its grace period."""
    import importlib.util

    code = (
        "import sys; from draftsmith.train.trainer.checkpoint import warm_imports as w; "
        "w(); print('deepspeed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert out.stdout.strip().splitlines()[-1] == str(importlib.util.find_spec("deepspeed") is not None), out.stderr
