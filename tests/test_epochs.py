"""optim.epochs: the run's steps follow from the training rows, the processes, the batch and the
accumulation, so more GPUs or more data keep the epochs the recipe asks for; optim.max_steps caps
them when both are set; optim.warmup_ratio is a share of them; `plan` prints the steps and epochs."""

import types

import pytest
from test_train import QUICK, TINY

from draftsmith.train.config import DEFAULT_MAX_STEPS, load_recipe
from draftsmith.train.trainer.schedule import run_length, steps_per_epoch


def optim(**kw):
    base = dict(batch_size=2, grad_accum=1, max_steps=None, epochs=None, warmup_steps=7, warmup_ratio=None)
    return types.SimpleNamespace(**(base | kw))


def test_steps_per_epoch_counts_micro_batches_per_process_and_accumulation():
    assert steps_per_epoch(100, 2, 1, 1) == 50
    assert steps_per_epoch(100, 2, 8, 1) == 6  # 100 // 16 micro-batches on each of 8 processes
    assert steps_per_epoch(100, 2, 2, 4) == 7  # 25 micro-batches: 6 full windows and the epoch's last
    assert steps_per_epoch(3, 2, 2, 1) == 1  # never zero


def test_epochs_give_the_steps_and_more_processes_the_same_epochs():
    one = run_length(optim(epochs=10), 1000, 8)
    two = run_length(optim(epochs=10), 1000, 16)
    assert one == (620, 7, 10.0) and two[0] == 310 and two[2] == pytest.approx(10.0, rel=0.02)
    assert run_length(optim(epochs=10), 4000, 8)[0] == 2500  # four times the data, four times the steps
    assert run_length(optim(epochs=1.5), 1000, 8)[0] == 93  # a fraction of an epoch rounds up


def test_max_steps_caps_the_epochs_and_warmup_ratio_follows_the_steps():
    assert run_length(optim(epochs=10, max_steps=100), 1000, 8) == (100, 7, pytest.approx(100 / 62))
    assert run_length(optim(epochs=1, max_steps=100), 1000, 8)[0] == 62  # the cap only lowers
    assert run_length(optim(max_steps=300), 1000, 8)[:2] == (300, 7)  # max_steps alone: as written
    assert run_length(optim(epochs=10, warmup_ratio=0.015), 1000, 8)[1] == 9  # round(0.015 x 620)


def test_the_recipe_default_without_epochs_is_the_old_one(tmp_path):
    assert load_recipe(TINY, ["--optim.max_steps=null"]).optim.max_steps == DEFAULT_MAX_STEPS
    assert load_recipe(TINY, ["--optim.max_steps=null", "--optim.epochs=2"]).optim.max_steps is None


def test_a_run_trains_the_epochs_it_was_given(tmp_path, tiny_cache):
    """Two epochs of the training rows at batch 4 on one process, 2 micro-batches accumulated; a cap of
    3 steps stops there."""
    from draftsmith.train.trainer.loop import train

    base = QUICK + ["--data.eval_rows=16", "--data.pack=false", "--optim.grad_accum=2", "--optim.max_steps=null"]
    base += ["--logging.acceptance_prompts=0", "--logging.eval_every=0", "--checkpoint.save_every=0"]
    summary = train(load_recipe(TINY, base + ["--optim.epochs=2", f"--checkpoint.output_dir={tmp_path / 'a'}"]))
    rows = summary["data"]["train_examples"]  # the tokenised rows the loader deals out
    assert summary["steps"] == 2 * steps_per_epoch(rows, 4, 1, 2) and summary["epochs"] == 2.0
    capped = base + ["--optim.epochs=2", "--optim.max_steps=3", f"--checkpoint.output_dir={tmp_path / 'b'}"]
    capped = train(load_recipe(TINY, capped))
    assert capped["steps"] == 3 and capped["epochs"] == pytest.approx(3 / steps_per_epoch(rows, 4, 1, 2), abs=1e-3)


def test_plan_prints_the_steps_and_the_epochs_they_cover(capsys):
    from draftsmith.cli import main

    recipe = "configs/llama-3.1-8b-instruct/eagle3.yaml"
    assert main(["plan", recipe, "--gpus", "8", "--gpu-memory", "80GB", "--optim.epochs=3"]) == 0
    out = capsys.readouterr().out
    assert "run: 4,688 optimizer steps = 3.00 epochs on 8 device(s)" in out and "4,688 steps = 3.0 epochs" in out
    # twice the GPUs: half the steps, the same epochs; a cap shows the epochs it leaves
    assert main(["plan", recipe, "--gpus", "8", "--nodes", "2", "--gpu-memory", "80GB", "--optim.epochs=3"]) == 0
    assert "2,344 steps = 3.0 epochs" in capsys.readouterr().out
    assert main(["plan", recipe, "--gpus", "8", "--gpu-memory", "80GB", "--optim.max_steps=1000"]) == 0
    assert "1,000 steps = 0.6 epochs" in capsys.readouterr().out
