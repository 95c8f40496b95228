"""A training run whose inputs are missing stops before any model loads: the regenerated chats a
recipe reads, its data file, its feature cache. The check is the trainer's first step, so the
target loader (which on a GPU node reads the 8B on every process) is never reached."""

import json

import pytest
import yaml
from test_regenerated_data import write_recipe

import draftsmith.train.trainer.loop as loop
from draftsmith.errors import DraftsmithError
from draftsmith.train.__main__ import main as train_main
from draftsmith.train.config import load_recipe


@pytest.fixture
def no_loading(monkeypatch):
    """The target loader fails the test if it is reached."""

    def refuse(*args, **kwargs):
        raise AssertionError("the target was loaded before the missing input was found")

    monkeypatch.setattr(loop, "load_target", refuse)


def trainer_error(recipe) -> str:
    with pytest.raises(DraftsmithError) as e:
        loop.Trainer(recipe)
    return str(e.value)


def test_missing_regenerated_chats_stop_before_the_target_loads(tmp_path, no_loading, capsys):
    path = write_recipe(tmp_path)  # data.source regenerated through an endpoint, no file yet
    message = trainer_error(load_recipe(path, []))
    assert "regenerated.jsonl does not exist: regenerate first" in message and "--data-only" in message
    assert not (tmp_path / "run").exists()  # nothing written
    # the command names the recipe it was given, and prints no plan first
    assert train_main([path]) == 2  # the CLI's exit status for a refused input
    out, err = capsys.readouterr()
    assert f"draftsmith train {path} --data-only" in err and "Traceback" not in err
    assert "plan:" not in out  # refused before the plan, which builds the models on the meta device


def test_an_endpoint_given_on_the_command_line_is_not_refused(tmp_path, no_loading):
    """With the endpoint and model named, the run regenerates itself: the check lets it through (to
    the loader, which this test stops)."""
    recipe = load_recipe(write_recipe(tmp_path), ["--data.regenerate_endpoint=http://127.0.0.1:9/v1"])
    with pytest.raises(AssertionError, match="target was loaded"):
        loop.Trainer(recipe)


def test_a_written_file_lets_the_run_through(tmp_path, no_loading):
    path = write_recipe(tmp_path)
    (tmp_path / "regenerated.jsonl").write_text(json.dumps({"index": 0, "messages": []}) + "\n")
    with pytest.raises(AssertionError, match="target was loaded"):
        loop.Trainer(load_recipe(path, []))


def test_a_missing_data_file_and_feature_cache(tmp_path, no_loading):
    path = write_recipe(tmp_path)
    recipe = load_recipe(path, [f"--data.path={tmp_path / 'gone.jsonl'}"])
    assert trainer_error(recipe) == f"data file not found: {tmp_path / 'gone.jsonl'} (data.path)"
    recipe = yaml.safe_load(open(path))
    recipe["data"] = {"path": recipe["data"]["path"], "max_length": 256}
    recipe["drafter"] = {"kind": "eagle3", "features": str(tmp_path / "feats")}
    (tmp_path / "feats").mkdir()  # a folder with no manifest: an extraction that never finished
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    message = trainer_error(load_recipe(str(tmp_path / "r.yaml"), []))
    assert message.startswith(f"drafter.features {tmp_path / 'feats'}: no feature cache there")
    assert "draftsmith features" in message


def test_acceptance_during_training_is_refused_under_zero3(tmp_path, no_loading, monkeypatch):
    """ZeRO-3 shards the drafter: τ cannot be measured while training, so best/ would silently be
    final/. The recipe's acceptance_every is refused in one line; set to 0, the run goes on."""
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")  # what `accelerate launch` sets for zero3.yaml
    path = write_recipe(tmp_path)
    (tmp_path / "regenerated.jsonl").write_text(json.dumps({"index": 0, "messages": []}) + "\n")
    every = ["--logging.acceptance_every=5", "--logging.acceptance_prompts=4"]
    message = trainer_error(load_recipe(path, every))
    assert message.startswith("logging.acceptance_every 5 under DeepSpeed ZeRO-3") and "\n" not in message
    assert "--logging.acceptance_every=0" in message
    with pytest.raises(AssertionError, match="target was loaded"):
        loop.Trainer(load_recipe(path, [*every, "--logging.acceptance_every=0"]))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    with pytest.raises(AssertionError, match="target was loaded"):
        loop.Trainer(load_recipe(path, every))


def test_a_deepspeed_config_file_of_stage_3_is_refused_too(tmp_path, no_loading, monkeypatch):
    """ZeRO-3 named by the DeepSpeed config file accelerate hands over (an accelerate config's
    deepspeed_config_file, or --deepspeed_config_file), not by zero_stage: the same one line, before
    any model loads; its stage wins over the environment's, "auto" leaves it to the environment."""
    from draftsmith.train.preflight import launch_zero_stage

    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    path = write_recipe(tmp_path)
    (tmp_path / "regenerated.jsonl").write_text(json.dumps({"index": 0, "messages": []}) + "\n")
    every = ["--logging.acceptance_every=5", "--logging.acceptance_prompts=4"]
    ds = tmp_path / "ds.json"
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ds))  # what `accelerate launch` sets for it
    for stage, zero_stage, refused in ((3, None, True), (2, None, False), ("auto", "3", True), ("auto", None, False),
                                       (2, "3", False)):  # fmt: skip
        ds.write_text(json.dumps({"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": "auto"}))
        if zero_stage:
            monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", zero_stage)
        else:
            monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
        assert launch_zero_stage() == (3 if refused else 2), (stage, zero_stage)
        if refused:
            message = trainer_error(load_recipe(path, every))
            assert message.startswith("logging.acceptance_every 5 under DeepSpeed ZeRO-3") and "\n" not in message
        else:
            with pytest.raises(AssertionError, match="target was loaded"):
                loop.Trainer(load_recipe(path, every))
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", '{"zero_optimization": {"stage": 3}}')  # the JSON itself
    assert launch_zero_stage() == 3
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    assert launch_zero_stage() is None  # no DeepSpeed


def test_the_loop_refuses_where_it_finds_zero3(tmp_path, no_loading, monkeypatch):
    """A ZeRO-3 run that preflight could not see (the accelerator is the last word) is refused with
    the same line as soon as the accelerator exists, and measuring τ during training under ZeRO-3
    raises it rather than skipping; the end-of-run measurement of an acceptance_every=0 run (the
    documented ZeRO-3 launch) is still skipped, for draftsmith eval to make."""
    import types

    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", raising=False)
    monkeypatch.setattr(loop, "is_zero3", lambda acc: True)
    path = write_recipe(tmp_path)
    (tmp_path / "regenerated.jsonl").write_text(json.dumps({"index": 0, "messages": []}) + "\n")
    every = ["--logging.acceptance_every=5", "--logging.acceptance_prompts=4"]
    recipe = load_recipe(path, every)
    message = trainer_error(recipe)
    assert message.startswith("logging.acceptance_every 5 under DeepSpeed ZeRO-3") and "\n" not in message

    def trainer(recipe):  # what measure_acceptance reads of a trainer
        return types.SimpleNamespace(recipe=recipe, acc=None, main=True, data=types.SimpleNamespace(eval_prompts=[1]))

    with pytest.raises(DraftsmithError) as e:
        loop.Trainer.measure_acceptance(trainer(recipe))
    assert str(e.value) == message
    assert loop.Trainer.measure_acceptance(trainer(load_recipe(path, [*every, "--logging.acceptance_every=0"]))) is None


def test_the_pages_zero3_lines_turn_acceptance_off():
    """Every ZeRO-3 launch on the pages and in the recipes' headers passes acceptance_every=0 where
    its recipe measures τ during training."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    texts = [p.read_text() for p in [root / "README.md", *root.glob("docs/*.md"), *root.glob("configs/*/*.yaml")]]
    lines = [line for t in texts for line in t.splitlines() if re.search(r"zero3\.yaml \S+\.yaml", line)]
    assert len(lines) >= 4
    for line in lines:
        recipe = re.search(r"zero3\.yaml (\S+\.yaml)", line).group(1)
        if load_recipe(root / recipe, []).logging.acceptance_every > 0:
            assert "--logging.acceptance_every=0" in line, line
