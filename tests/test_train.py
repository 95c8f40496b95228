"""The trainer end to end on the tiny-random target: recipes, losses falling, checkpoints that
load as drafters, resume after SIGKILL, distributed runs, and clear errors on bad input."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import load_recipe

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny" / "draft_lm.yaml"
# Small and quick: the tiny recipe cut down to a few seconds of training.
QUICK = [
    "--data.max_rows=120",
    "--data.max_length=64",
    "--optim.batch_size=4",
    "--logging.progress=false",
    "--logging.eval_every=1000",
    "--logging.acceptance_prompts=1",
    "--logging.acceptance_max_new_tokens=8",
]


def run(tmp_path, *overrides, resume=None):
    from draftsmith.train.trainer.loop import train

    recipe = load_recipe(TINY, QUICK + [f"--checkpoint.output_dir={tmp_path}"] + list(overrides))
    return train(recipe, resume=resume)


def losses(summary, key="train/loss"):
    return [h[key] for h in summary["history"] if key in h]


# --- recipes ---------------------------------------------------------------------------------


def test_every_recipe_parses_and_starts_with_its_launch_command():
    recipes = sorted((ROOT / "configs").glob("*/*.yaml"))
    recipes = [p for p in recipes if p.parent.name != "accelerate"]
    assert len(recipes) >= 4
    for path in recipes:
        load_recipe(path)
        first = path.read_text().splitlines()[0]
        text = path.read_text()
        assert first.startswith("#"), path
        assert f"train {path.relative_to(ROOT)}" in text or f"draftsmith.train {path.relative_to(ROOT)}" in text, path
    for mode in ("single", "ddp", "zero2", "zero3", "fsdp"):
        cfg = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{mode}.yaml").read_text())
        assert cfg["distributed_type"] in ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP")


def test_overrides_and_unknown_keys():
    r = load_recipe(
        TINY,
        ["--optim.lr=3e-4", "--data.max_length", "96", "--drafter.divergence=jsd", "--logging.trackers=[tensorboard]"],
    )
    assert (r.optim.lr, r.data.max_length, r.drafter.divergence, r.logging.trackers) == (
        3e-4,
        96,
        "jsd",
        ["tensorboard"],
    )
    with pytest.raises(DraftsmithError, match=r"unknown config key 'optim.lrr' \(did you mean 'optim.lr'\?\)"):
        load_recipe(TINY, ["--optim.lrr=1"])
    with pytest.raises(DraftsmithError, match="unknown config key 'drafter.num_heads'"):
        load_recipe(TINY, ["--drafter.num_heads=4"])
    with pytest.raises(DraftsmithError, match="'optim.max_steps': expected int"):
        load_recipe(TINY, ["--optim.max_steps=ten"])
    with pytest.raises(DraftsmithError, match="drafter.divergence"):
        load_recipe(TINY, ["--drafter.divergence=kl"])


def test_cli_reports_config_errors_in_one_line(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "draftsmith", "train", str(TINY), "--optim.warmup=3"], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert "unknown config key 'optim.warmup' (did you mean 'optim.warmup_steps'?)" in p.stderr
    assert "Traceback" not in p.stderr


# --- training, checkpoints, loading ------------------------------------------------------------


def test_tiny_training_loss_falls_and_checkpoint_is_a_drafter(tiny_target, tmp_path, fresh_accelerate):
    from draftsmith.infer.engine import Engine
    from draftsmith.models import load_drafter

    s = run(tmp_path, "--optim.max_steps=30", "--logging.log_every=5", "--checkpoint.save_every=10")
    curve = losses(s)
    assert curve[-1] < 0.6 * curve[0], curve
    assert s["eval"]["eval/token_acceptance"] > 0.5
    # step-10 was pruned (keep_last=2); final/ and the last two steps remain, none partial
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert names == ["best", "final", "step-0000020", "step-0000030"], names  # best/: the end-of-run τ
    meta = json.loads((tmp_path / "final" / "drafter.json").read_text())
    assert meta["kind"] == "draft_lm" and meta["target"] == "tiny-random"
    assert not any("lm_head" in k or "embed" in k for k in meta)  # the target is never saved
    # the folder is a drafter: greedy speculative output equals plain decoding token for token
    drafter = load_drafter(str(tmp_path / "final"), tiny_target)
    engine = Engine(tiny_target, drafter, 4)
    prompt = tiny_target.tokenizer("hello there, how are")["input_ids"]
    spec = engine.generate(prompt, 24)
    plain = engine.generate(prompt, 24, speculative=False)
    assert spec.tokens == plain.tokens
    assert spec.metrics.mean_acceptance_length > 1.5
    # ... and transformers' assisted generation takes it as assistant_model
    ids = torch.tensor([prompt])
    out = tiny_target.model.generate(
        ids, assistant_model=drafter.as_assistant_model(), max_new_tokens=12, do_sample=False
    )
    ref = tiny_target.model.generate(ids, max_new_tokens=12, do_sample=False)
    assert out.tolist() == ref.tolist()


@pytest.mark.parametrize("kind", ["fkl", "rkl", "jsd", "tvd", "ce"])
def test_each_distillation_loss_falls(kind, tiny_cache, tmp_path, fresh_accelerate):
    s = run(
        tmp_path,
        f"--drafter.divergence={kind}",
        "--optim.max_steps=24",
        "--logging.log_every=4",
        "--logging.acceptance_prompts=0",
    )
    curve = losses(s)
    assert curve[-1] < 0.8 * curve[0], (kind, curve)


def test_on_policy_and_lora(tiny_cache, tmp_path, fresh_accelerate):
    pytest.importorskip("peft")
    s = run(
        tmp_path,
        "--drafter.on_policy_fraction=1.0",
        "--drafter.on_policy_tokens=8",
        "--drafter.lora.r=4",
        "--optim.max_steps=6",
        "--logging.log_every=2",
        "--optim.lr=1e-2",
        "--logging.acceptance_prompts=0",
    )
    assert all(torch.isfinite(torch.tensor(losses(s))))
    final = tmp_path / "final"
    assert (final / "adapter" / "adapter_config.json").is_file()
    from safetensors.torch import load_file

    weights = load_file(final / "model.safetensors")
    assert not any("lora" in k for k in weights)  # merged: a plain causal LM
    assert any(k.startswith("model.layers.1.") for k in weights)


def test_trackers_write_offline(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc: wandb must go offline
    trackers = "[tensorboard,wandb]" if _has("wandb") else "[tensorboard]"
    run(
        tmp_path,
        "--optim.max_steps=4",
        "--logging.log_every=2",
        f"--logging.trackers={trackers}",
        "--logging.acceptance_prompts=0",
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((tmp_path / "logs").rglob("events.out.tfevents.*"))
    assert events
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"]
    if _has("wandb"):
        assert os.environ.get("WANDB_MODE") == "offline"
        assert list(tmp_path.rglob("offline-run-*"))


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- resume after SIGKILL ----------------------------------------------------------------------

KILL_ARGS = [
    "--optim.max_steps=24",
    "--checkpoint.save_every=4",
    "--logging.log_every=1",
    "--logging.acceptance_prompts=0",
    "--checkpoint.keep_last=3",
]


def _launch(out, *extra):
    cmd = [sys.executable, "-m", "draftsmith.train", str(TINY), "--output-dir", str(out), *QUICK, *KILL_ARGS, *extra]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )


def test_sigkill_then_resume_matches_uninterrupted(tiny_cache, tmp_path):
    ref_dir, cut_dir = tmp_path / "ref", tmp_path / "cut"
    proc = _launch(cut_dir)
    deadline = time.time() + 300
    while not (cut_dir / "step-0000012").is_dir():  # let it save three checkpoints, then kill it mid-run
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut_dir / "final").exists()
    # every checkpoint under a real name is complete and loads
    from draftsmith.train.trainer.checkpoint import complete_checkpoints

    steps = [p for p in cut_dir.iterdir() if p.name.startswith("step-")]
    assert steps and set(steps) == set(complete_checkpoints(cut_dir))
    assert _launch(cut_dir, "--resume").wait() == 0
    assert _launch(ref_dir).wait() == 0
    resumed = json.loads((cut_dir / "train_summary.json").read_text())
    ref = json.loads((ref_dir / "train_summary.json").read_text())
    assert resumed["steps"] == ref["steps"] == 24
    assert resumed["tokens"] == ref["tokens"]  # the data position was restored, not replayed
    by_step = lambda s: {h["step"]: h["train/loss"] for h in s["history"] if "train/loss" in h}  # noqa: E731
    a, b = by_step(resumed), by_step(ref)
    assert sorted(a) == sorted(b) == list(range(1, 25))
    for step in b:
        assert a[step] == pytest.approx(b[step], rel=1e-4, abs=1e-5), step
    assert resumed["eval"]["eval/loss"] == pytest.approx(ref["eval"]["eval/loss"], rel=1e-4)
    assert not list(cut_dir.glob(".tmp-*"))


def test_sigterm_checkpoints_the_current_step_then_resume_finishes(tiny_cache, tmp_path):
    out = tmp_path / "run"
    proc = _launch(out, "--checkpoint.save_every=100")  # no periodic checkpoint before the signal
    for line in proc.stderr:  # the run logs "step N train/loss=..." once per step
        if line.startswith("step 2 "):
            break
    else:
        pytest.fail(f"the run ended before step 2 (rc {proc.wait()})")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143, proc.stderr.read()[-2000:]
    from draftsmith.train.trainer.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(out)
    assert ckpt is not None and not (out / "final").exists()
    stopped_at = json.loads((ckpt / "trainer_state.json").read_text())["step"]
    assert 1 <= stopped_at < 24
    assert _launch(out, "--resume", "--checkpoint.save_every=100").wait() == 0
    assert json.loads((out / "train_summary.json").read_text())["steps"] == 24


# --- bad input ---------------------------------------------------------------------------------


def test_missing_column_is_a_clear_error(tiny_cache, tmp_path, fresh_accelerate):
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps({"conversation": [{"role": "user", "content": "hi"}]}) for _ in range(20)))
    with pytest.raises(DraftsmithError, match="messages"):
        run(tmp_path / "out", f"--data.path={data}", "--data.format=chat")


def test_draft_with_another_tokenizer_is_refused(tiny_cache, tmp_path, fresh_accelerate):
    from draftsmith.models.sources import load_causal_lm, load_tokenizer

    other = tmp_path / "other-draft"
    load_causal_lm("tiny-random").save_pretrained(other)
    tok = load_tokenizer("tiny-random")
    tok.add_tokens(["<extra_token>"])
    tok.save_pretrained(other)
    with pytest.raises(DraftsmithError, match="do not share a tokenizer"):
        run(tmp_path / "out", f"--drafter.init={other}")


def test_checkpoint_of_another_kind_is_refused(tiny_cache, tmp_path, fresh_accelerate):
    from draftsmith.models import write_drafter_meta

    other = tmp_path / "medusa-ckpt"
    other.mkdir()
    write_drafter_meta(other, "medusa", "tiny-random")
    with pytest.raises(DraftsmithError, match="a 'medusa' checkpoint, but this recipe trains a 'draft_lm'"):
        run(tmp_path / "out", f"--drafter.init={other}")
    # resuming into an output dir whose checkpoints belong to another kind
    out = tmp_path / "out2"
    step = out / "step-0000004"
    step.mkdir(parents=True)
    write_drafter_meta(step, "eagle3", "tiny-random")
    (step / "trainer_state.json").write_text("{}")
    with pytest.raises(DraftsmithError, match="a 'eagle3' checkpoint; this recipe trains a 'draft_lm'"):
        run(out, resume=True)


def test_existing_checkpoints_need_resume(tiny_cache, tmp_path, fresh_accelerate):
    run(tmp_path, "--optim.max_steps=2", "--logging.acceptance_prompts=0")
    with pytest.raises(DraftsmithError, match="--resume"):
        run(tmp_path, "--optim.max_steps=2")


def test_zero_intervals_switch_off(tiny_cache, tmp_path, fresh_accelerate):
    """log_every, eval_every, save_every = 0 mean off (they raised ZeroDivisionError after step 1)."""
    s = run(
        tmp_path,
        "--optim.max_steps=3",
        "--logging.log_every=0",
        "--logging.eval_every=0",
        "--checkpoint.save_every=0",
        "--logging.acceptance_prompts=0",
    )
    assert [h["step"] for h in s["history"] if "train/loss" in h] == [3]  # the last step's average only
    assert [h["step"] for h in s["history"] if "eval/loss" in h] == [3]  # the final evaluation only
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["final", "step-0000003"]


def test_pruning_never_trades_an_intact_checkpoint_for_a_damaged_one(tiny_cache, tmp_path, fresh_accelerate, caplog):
    """After a resume, keep_last pruning deleted an intact older step and kept a newer one whose
    weights were gone: only intact checkpoints count, damaged ones are kept and named."""
    run(tmp_path, "--optim.max_steps=3", "--checkpoint.save_every=1", "--logging.acceptance_prompts=0")
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-0000002", "step-0000003"]
    (tmp_path / "step-0000003" / "model.safetensors").unlink()  # its training state still resumes
    with caplog.at_level("WARNING", logger="draftsmith.train"):
        run(tmp_path, "--optim.max_steps=4", "--checkpoint.save_every=1", "--logging.acceptance_prompts=0", resume=True)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-0000002", "step-0000003", "step-0000004"]
    assert "step-0000003 is damaged" in caplog.text and "not counted in checkpoint.keep_last" in caplog.text
    from draftsmith.train.trainer.checkpoint import verify

    assert verify(tmp_path / "step-0000002") == [] and verify(tmp_path / "step-0000004") == []
    assert verify(tmp_path / "step-0000003")  # named, not silently trusted


class _Acc:
    """The slice of accelerate's Accelerator that checkpoint.save uses, for one process."""

    is_main_process = True

    def wait_for_everyone(self):
        pass

    def save_state(self, folder):
        os.makedirs(folder)
        pathlib.Path(folder, "optimizer.bin").write_bytes(b"state")

    def get_state_dict(self, model):
        return model

    def unwrap_model(self, model):
        return model


class _Task:
    """Saves a drafter folder: drafter.json, config.json and the tensors given (None: no weights)."""

    def save(self, model, state_dict, folder, extra):
        from safetensors.torch import save_file

        from draftsmith.models import write_drafter_meta

        write_drafter_meta(folder, "draft_lm", "tiny-random", step=extra["step"])
        (folder / "config.json").write_text("{}")
        if state_dict is not None:
            save_file(state_dict, str(folder / "model.safetensors"))


def test_save_names_a_checkpoint_only_once_it_is_complete(tmp_path):
    from draftsmith.train.trainer import checkpoint

    state = {"step": 2, "epoch": 0, "batch_in_epoch": 2}
    first = checkpoint.save(_Acc(), _Task(), {"w": torch.ones(3)}, tmp_path, "step-0000002", state, {"step": 2})
    assert checkpoint.verify(first) == []
    with pytest.raises(
        DraftsmithError, match="checkpoint step-0000004 came out incomplete .*no weights.*earlier checkpoints"
    ):
        checkpoint.save(_Acc(), _Task(), None, tmp_path, "step-0000004", {**state, "step": 4}, {"step": 4})
    assert not (tmp_path / "step-0000004").exists() and checkpoint.latest_checkpoint(tmp_path) == first
    # Re-saving the same step replaces it whole; nothing of the old one is left behind.
    checkpoint.save(_Acc(), _Task(), {"w": torch.zeros(5)}, tmp_path, "step-0000002", state, {"step": 2})
    from safetensors.torch import load_file

    assert load_file(first / "model.safetensors")["w"].shape == (5,)
    # the failed save removed its own partial folder: nothing is left for the next start to clean
    assert checkpoint.remove_partial(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000002"]


def test_a_kill_during_a_same_step_resave_restores_the_old_checkpoint(tmp_path):
    from draftsmith.train.trainer import checkpoint

    state = {"step": 2, "epoch": 0, "batch_in_epoch": 2}
    ckpt = checkpoint.save(_Acc(), _Task(), {"w": torch.ones(3)}, tmp_path, "step-0000002", state, {"step": 2})
    os.replace(ckpt, tmp_path / ".old-step-0000002")  # killed between moving the old one aside and renaming the new one
    (tmp_path / ".tmp-step-0000002").mkdir()
    assert checkpoint.remove_partial(tmp_path) == ["restored step-0000002", "removed .tmp-step-0000002"]
    assert checkpoint.latest_checkpoint(tmp_path) == ckpt and checkpoint.verify(ckpt) == []


def test_time_budget_spans_resumes(tiny_cache, tmp_path, fresh_accelerate):
    """optim.max_minutes bounds the whole job: a resumed run gets only the time the earlier runs left."""
    run(tmp_path, "--optim.max_steps=4", "--logging.acceptance_prompts=0")
    state_file = tmp_path / "step-0000004" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["train_seconds"] > 0
    state["train_seconds"] = 3600.0  # as if the killed run had already trained an hour
    state_file.write_text(json.dumps(state))
    summary = run(
        tmp_path, "--optim.max_steps=8", "--optim.max_minutes=1", "--logging.acceptance_prompts=0", resume=True
    )
    assert summary["steps"] == 5  # one step, then the spent budget stops it
    assert summary["train_seconds"] >= 3600


def test_corrupt_checkpoint_is_named(tiny_cache, tmp_path, fresh_accelerate):
    from draftsmith.models import load_drafter

    run(tmp_path, "--optim.max_steps=2", "--logging.acceptance_prompts=0")
    state = tmp_path / "step-0000002" / "trainer_state.json"
    good = state.read_text()
    state.write_text("{}")
    with pytest.raises(DraftsmithError, match="trainer_state.json: corrupt checkpoint"):
        run(tmp_path, "--optim.max_steps=4", resume=True)
    state.write_text(good)
    (tmp_path / "step-0000002" / "training_state" / "optimizer.bin").write_bytes(b"truncated")
    with pytest.raises(DraftsmithError, match="corrupt training state"):
        run(tmp_path, "--optim.max_steps=4", resume=True)
    (tmp_path / "final" / "model.safetensors").write_bytes(b"not a safetensors file")
    from draftsmith.models import Target

    target = Target.load("tiny-random")
    with pytest.raises(DraftsmithError, match="could not load"):
        load_drafter(str(tmp_path / "final"), target)


# --- distributed on one machine ---------------------------------------------------------------


def _accelerate(mode, out, env_extra=None, steps=4):
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs" / "accelerate" / f"{mode}.yaml"),
        *([] if mode == "single" else ["--num_processes", "2"]),  # the configs leave the count to the user
        "-m",
        "draftsmith.train",
        str(TINY),
        "--output-dir",
        str(out),
        *QUICK,
        f"--optim.max_steps={steps}",
        "--checkpoint.save_every=2",
        "--logging.log_every=1",
        "--logging.acceptance_prompts=0",
    ]
    env = {**os.environ, **(env_extra or {})}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "train_summary.json").read_text())


@pytest.fixture(scope="module")
def ddp_summary(tiny_target, tmp_path_factory):
    # tiny_target: tiny-random is built here first. Built by a rank instead, transformers'
    # save_pretrained writes no weights outside rank 0 of the initialised process group.
    return _accelerate("ddp", tmp_path_factory.mktemp("ddp"), {"ACCELERATE_USE_CPU": "1"})


def test_ddp_two_processes_identical_parameters(ddp_summary):
    s = ddp_summary
    assert s["world_size"] == 2 and "MULTI_CPU" in s["distributed_type"]
    a, b = s["param_fingerprints"]
    assert a == b


def test_deepspeed_zero2_two_processes_identical_parameters(ddp_summary, tmp_path):
    pytest.importorskip("deepspeed")
    # No ACCELERATE_USE_CPU here: with it accelerate silently runs plain DDP instead of DeepSpeed.
    s = _accelerate("zero2", tmp_path)
    assert s["world_size"] == 2 and "DEEPSPEED" in s["distributed_type"]
    a, b = s["param_fingerprints"]
    assert a == b
    # same data, same initial weights, same optimiser: the loss curve is DDP's
    assert losses(s) == pytest.approx(losses(ddp_summary), rel=1e-3)


def test_deepspeed_zero3_trains_sharded_and_saves_a_whole_drafter(ddp_summary, tmp_path, tiny_target):
    pytest.importorskip("deepspeed")
    from draftsmith.models import load_drafter

    s = _accelerate("zero3", tmp_path)
    assert s["world_size"] == 2 and "DEEPSPEED" in s["distributed_type"]
    assert losses(s) == pytest.approx(losses(ddp_summary), rel=1e-3)
    drafter = load_drafter(str(tmp_path / "final"), tiny_target)  # gathered, not shards
    assert drafter.model.config.num_hidden_layers == 2
    assert all(p.numel() > 0 for p in drafter.model.parameters())


# --- the real recipes (slow: real offline models) ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    [
        "smollm2-135m-instruct/draft_lm.yaml",
        "smollm2-135m-instruct/draft_lm_lora.yaml",
        "smollm2-135m-instruct/draft_lm_code.yaml",
        "qwen2.5-coder-1.5b-instruct/draft_lm.yaml",
    ],
)
def test_real_recipe_two_steps(recipe, tmp_path, fresh_accelerate):
    from draftsmith.models.sources import resolve_model
    from draftsmith.train.trainer.loop import train

    r = load_recipe(
        ROOT / "configs" / recipe,
        [
            "--optim.max_steps=2",
            "--optim.batch_size=1",
            "--data.max_length=64",
            "--data.max_rows=40",
            "--data.eval_rows=4",
            "--logging.progress=false",
            "--logging.eval_batches=1",
            "--logging.acceptance_prompts=1",
            "--logging.acceptance_max_new_tokens=8",
            "--optim.grad_accum=1",
            f"--checkpoint.output_dir={tmp_path}",
        ],
    )
    for name in (r.model.target, r.drafter.init):
        if not name.startswith("truncated:"):
            try:
                resolve_model(name)
            except DraftsmithError as e:
                pytest.skip(str(e))
    s = train(r)
    assert s["steps"] == 2 and (tmp_path / "final" / "drafter.json").is_file()
    assert s["acceptance"]["mean_acceptance_length"] >= 1.0


def test_fsdp_without_gpus_is_a_clear_error(tiny_cache, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("has GPUs: FSDP runs")
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs" / "accelerate" / "fsdp.yaml"),
        "--num_processes",
        "2",
        "-m",
        "draftsmith.train",
        str(TINY),
        "--output-dir",
        str(tmp_path),
        *QUICK,
        "--optim.max_steps=1",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    assert "FSDP was requested but accelerate runs FSDP on GPUs only" in p.stderr
