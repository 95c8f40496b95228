"""More than one machine: the same trainer under `accelerate launch` on two "machines" (one
process each, machine_rank 0 and 1, rendezvous on 127.0.0.1, gloo), with the multi-machine
configs users launch on a cluster (configs/accelerate/multinode_*.yaml, scripts/slurm_train.sh).
Same losses as the single-machine 2-process DDP run, checkpoints written once, resume works,
DeepSpeed ZeRO-3 the same way."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny" / "draft_lm.yaml"
STEPS = 6
ARGS = [
    "--data.max_rows=120",
    "--data.max_length=64",
    "--optim.batch_size=4",
    "--logging.progress=false",
    f"--optim.max_steps={STEPS}",
    "--checkpoint.save_every=2",
    "--logging.log_every=1",
    "--logging.eval_every=1000",
    "--logging.acceptance_prompts=0",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(config: str, out: pathlib.Path, machine_rank: int | None, port: int, env_extra: dict, extra=(), log=None):
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs" / "accelerate" / config),
        "--num_processes",  # the configs leave the count to the user: 2 in all, one or two machines
        "2",
    ]
    if machine_rank is not None:
        cmd += ["--machine_rank", str(machine_rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port)]
    cmd += ["-m", "draftsmith.train", str(TINY), "--output-dir", str(out), *ARGS, *extra]
    # Output to a file, not a pipe: a machine whose pipe nobody reads would block on a full one
    # while the other waits for it at a barrier.
    log = log or out.parent / f"{out.name}-launch.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env_extra})
    proc.log = log
    return proc


def two_machines(config: str, out: pathlib.Path, env_extra=None, extra=()) -> tuple[dict, str]:
    """Both machines' launches at once -> (train_summary.json, both machines' logs)."""
    port = _free_port()
    procs = [
        _launch(config, out, r, port, env_extra or {}, extra, log=out.parent / f"{out.name}-machine{r}.log")
        for r in (0, 1)
    ]
    for p in procs:
        p.wait(timeout=900)
    logs = [p.log.read_text() for p in procs]
    for r, (p, err) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"machine {r} failed:\n{err[-3000:]}\n--- the other machine:\n{logs[1 - r][-3000:]}"
    return json.loads((out / "train_summary.json").read_text()), "\n".join(logs)


def losses(summary):
    return {h["step"]: h["train/loss"] for h in summary["history"] if "train/loss" in h}


@pytest.fixture(scope="module")
def single_machine_ddp(tiny_target, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    p = _launch("ddp.yaml", out, None, 0, {"ACCELERATE_USE_CPU": "1"})
    p.wait(timeout=900)
    assert p.returncode == 0, p.log.read_text()[-3000:]
    return json.loads((out / "train_summary.json").read_text())


@pytest.fixture(scope="module")
def two_machine_ddp(single_machine_ddp, tmp_path_factory):
    out = tmp_path_factory.mktemp("multinode")
    summary, logs = two_machines("multinode_ddp.yaml", out, {"ACCELERATE_USE_CPU": "1"})
    return out, summary, logs


def test_two_machines_train_as_one_two_process_run(two_machine_ddp, single_machine_ddp):
    _, s, _ = two_machine_ddp
    assert s["world_size"] == 2 and s["num_machines"] == 2 and "MULTI_CPU" in s["distributed_type"]
    assert sorted((p["rank"], p["machine_rank"]) for p in s["processes"]) == [(0, 0), (1, 1)]
    a, b = s["param_fingerprints"]
    assert a == b  # the ranks hold the same drafter
    ref = losses(single_machine_ddp)
    assert sorted(losses(s)) == list(range(1, STEPS + 1))
    assert losses(s) == pytest.approx(ref, rel=1e-5)  # same data split, same initial weights, same optimiser


def test_checkpoints_are_written_once_over_all_machines(two_machine_ddp):
    out, _, logs = two_machine_ddp
    written = [
        line.split("checkpoint ", 1)[1].split(" written")[0]
        for line in logs.splitlines()
        if " written by process " in line
    ]
    assert written == ["step-0000002", "step-0000004", "step-0000006", "final"]
    assert all("written by process 0 of 2" in line for line in logs.splitlines() if " written by process " in line)
    kept = sorted(p.name for p in out.iterdir() if p.name.startswith(("step-", "final")))
    assert kept == ["final", "step-0000004", "step-0000006"]  # checkpoint.keep_last 2 pruned step 2, once
    # each process's RNG state beside the one copy of the weights and optimiser
    state = sorted(p.name for p in (out / "step-0000004" / "training_state").iterdir())
    assert "random_states_0.pkl" in state and "random_states_1.pkl" in state


def test_two_machines_resume_where_the_checkpoint_left_off(two_machine_ddp, tmp_path):
    out, full, _ = two_machine_ddp
    cut = tmp_path / "cut"
    shutil.copytree(out / "step-0000004", cut / "step-0000004")  # as if both machines died after step 4's checkpoint
    shutil.copy(out / "recipe.yaml", cut / "recipe.yaml")
    resumed, logs = two_machines("multinode_ddp.yaml", cut, {"ACCELERATE_USE_CPU": "1"}, ["--resume"])
    assert "resumed from step-0000004 (step 4" in logs
    # steps 1-4 come back with the checkpoint's history, 5-6 are trained again: the same numbers
    assert losses(resumed) == pytest.approx(losses(full), rel=1e-5)
    assert resumed["param_fingerprints"] == full["param_fingerprints"]


def test_two_machines_deepspeed_zero3(single_machine_ddp, tmp_path, tiny_target):
    pytest.importorskip("deepspeed")
    from draftsmith.models import load_drafter

    s, logs = two_machines("multinode_zero3.yaml", tmp_path)  # no ACCELERATE_USE_CPU: it would mean plain DDP
    assert s["world_size"] == 2 and s["num_machines"] == 2 and "DEEPSPEED" in s["distributed_type"]
    assert losses(s) == pytest.approx(losses(single_machine_ddp), rel=1e-3)
    assert logs.count(" written by process 0 of 2") == 4 and " written by process 1 " not in logs
    drafter = load_drafter(str(tmp_path / "final"), tiny_target)  # gathered from the shards of both machines
    assert all(p.numel() > 0 for p in drafter.model.parameters())


def test_slurm_script_launches_one_accelerate_per_node(tmp_path):
    """scripts/slurm_train.sh under a fake SLURM environment: the accelerate command it runs on a
    node, with that node's rank, the first node as the rendezvous host and the total process count.
    The fake scontrol names 30,000 hosts (1.1 MB, more than a pipe holds): a script that stops
    reading after the first name leaves it writing into a closed pipe, and under `set -o pipefail`
    its SIGPIPE fails the script (exit 141) every time."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames node-[00000-29999]" ] || exit 3\n'
        "seq -f 'node-%05g.rack-a.cluster.example.org' 0 29999\n"
    )
    (fake / "srun").write_text('#!/bin/sh\nexec "$@"\n')  # one node's task, run here
    for f in fake.iterdir():
        f.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node-[00000-29999]",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "42",
        "DRY_RUN": "1",
        "PROCESSES_PER_NODE": "4",
    }
    r = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "slurm_train.sh"),
            "configs/accelerate/multinode_ddp.yaml",
            "configs/smollm2-135m-instruct/eagle3.yaml",
            "--optim.max_steps=10",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    cmd = r.stdout.strip().splitlines()[-1]
    for part in (
        "accelerate launch",
        "--config_file configs/accelerate/multinode_ddp.yaml",
        "--num_machines 2",
        "--num_processes 8",
        "--machine_rank 1",
        "--main_process_ip node-00000.rack-a.cluster.example.org ",
        "-m draftsmith.train",
        "configs/smollm2-135m-instruct/eagle3.yaml",
        "--optim.max_steps=10",
    ):
        assert part in cmd, (part, cmd)
