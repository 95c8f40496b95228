"""The training-task contract (train/tasks/base.py): the base class's defaults, its one save() and one
runtime_drafter(), and every kind's recipe dataclass and task in one home."""

import dataclasses
import json
import types
import typing

import pytest
import torch

from draftsmith import kinds
from draftsmith.errors import DraftsmithError
from draftsmith.models import read_drafter_meta
from draftsmith.train.distributed import unwrap
from draftsmith.train.tasks.base import TrainingTask


class _Config(types.SimpleNamespace):
    def update(self, values):
        for key, value in values.items():
            setattr(self, key, value)


class _Model(torch.nn.Module):
    """Two parameters, one frozen; save_pretrained writes its config as the checkpoint's config.json."""

    def __init__(self):
        super().__init__()
        self.trained = torch.nn.Linear(2, 2)
        self.frozen = torch.nn.Linear(2, 2).requires_grad_(False)
        self.config = _Config(width=2)
        self.saved_state = "unset"

    def save_pretrained(self, folder, state_dict=None):
        self.saved_state = state_dict
        (folder / "config.json").write_text(json.dumps(vars(self.config)))


class _Tokenizer:
    def save_pretrained(self, folder):
        (folder / "tokenizer.json").write_text("{}")


class _Drafter:
    def __init__(self, model, target, name, freeze=True):
        self.model, self.target, self.name, self.freeze = model, target, name, freeze


class _Task(TrainingTask):
    """Only what a kind must write: its name, its runtime drafter, its model."""

    kind = "toy"
    drafter_class = _Drafter

    def __init__(self, cfg=None, target=None, seed=0):
        super().__init__(cfg, target or types.SimpleNamespace(name="tiny", tokenizer=_Tokenizer()), seed)
        self.model = _Model()


def test_the_base_class_declares_every_member_with_its_default():
    task = _Task(cfg="the recipe's drafter section", seed=3)
    assert (task.cfg, task.seed, task.target.name) == ("the recipe's drafter section", 3, "tiny")
    assert task.acceptance_k == 4 and task.layers == () and task.train_steps == 1
    assert _Task.feature_layers(None, None) == ()  # reads no target hidden states: nothing to cache
    assert task.bind_data(object(), object()) is None
    assert task.draft_passes(512, 0.25) == (1, 0.25)
    assert task.trainable_parameters() == [task.model.trained.weight, task.model.trained.bias]
    assert task.config_updates(task.model) == {} and task.meta(task.model) == {}
    with pytest.raises(NotImplementedError, match="_Task has no loss"):
        task.loss(task.model, {})


def test_train_steps_feed_the_plan_s_draft_passes():
    class Unrolled(_Task):
        train_steps = 7

    assert Unrolled().draft_passes(128, 0.5) == (7, 0.5)


def test_save_writes_weights_tokenizer_and_drafter_json_with_the_kind_s_hooks(tmp_path):
    seen = {}

    class Hooked(_Task):
        def config_updates(self, model):
            return {"target": self.target.name, "k": 3}

        def meta(self, model):
            return {"width": model.config.width, "init": None}

        def save_weights(self, model, state_dict, folder, evaluation):
            seen["evaluation"] = evaluation
            super().save_weights(model, state_dict, folder, evaluation)

    task = Hooked()
    state = {"w": torch.ones(1)}
    task.save(task.model, state, tmp_path, {"step": 5, "eval": {"eval/loss": 1.5}})
    assert task.model.saved_state is state
    assert json.loads((tmp_path / "config.json").read_text()) == {"width": 2, "target": "tiny", "k": 3}
    assert (tmp_path / "tokenizer.json").is_file()
    meta = read_drafter_meta(tmp_path)
    # The kind and target, then the kind's meta in its order, then the trainer's extra; the
    # evaluation goes to save_weights (Medusa's head accuracies), never into drafter.json.
    assert list(meta)[1:] == ["kind", "target", "width", "init", "step"]
    assert (meta["kind"], meta["target"], meta["width"], meta["step"]) == ("toy", "tiny", 2, 5)
    assert seen["evaluation"] == {"eval/loss": 1.5}


def test_runtime_drafter_is_the_live_model_unfrozen():
    task = _Task()
    drafter = task.runtime_drafter(task.model)
    assert isinstance(drafter, _Drafter)
    assert (drafter.model, drafter.target, drafter.name, drafter.freeze) == (
        task.model,
        task.target,
        "toy@training",
        False,
    )


def test_unwrap_takes_the_module_out_of_a_wrapper():
    model = _Model()
    assert unwrap(model) is model
    assert unwrap(types.SimpleNamespace(module=model)) is model


def test_every_kind_s_task_and_recipe_dataclass_share_one_home():
    trainable = [k for k in kinds.KINDS.values() if k.trainable]
    assert trainable
    for kind in trainable:
        assert issubclass(kind.task, TrainingTask), kind.name
        assert kind.config.__name__.endswith("TrainConfig"), kind.config.__name__
        assert kind.config.__module__ == kind.task.__module__ == f"draftsmith.train.tasks.{kind.name}"


@dataclasses.dataclass
class ToyTrainConfig:
    kind: str = "toy"
    flavour: str = "plain"
    CHOICES: typing.ClassVar[dict] = {"flavour": ("plain", "spiced")}


def test_choices_come_from_the_registered_kinds(monkeypatch):
    from draftsmith.train import config
    from draftsmith.train.tasks.medusa import MedusaTrainConfig

    assert config.CHOICES["drafter.mode"] == MedusaTrainConfig.CHOICES["mode"]
    assert config.CHOICES["model.target_dtype"] == ("auto", "float32", "bfloat16", "float16")
    assert "drafter.flavour" not in config.CHOICES

    toy = kinds.Kind("toy", "draftsmith.models.draft_lm:DraftLM", f"{__name__}:ToyTrainConfig", f"{__name__}:_Task")
    monkeypatch.setitem(kinds.KINDS, "toy", toy)
    assert config.CHOICES["drafter.flavour"] == ("plain", "spiced")
    assert config.recipe_from_dict({"drafter": {"kind": "toy", "flavour": "spiced"}}).drafter.flavour == "spiced"
    with pytest.raises(DraftsmithError, match="'drafter.flavour': 'sour' is not one of plain, spiced"):
        config.recipe_from_dict({"drafter": {"kind": "toy", "flavour": "sour"}})


def test_a_recipe_without_a_drafter_section_trains_the_default_kind():
    from draftsmith.train.config import DEFAULT_KIND, Recipe, recipe_from_dict

    assert type(recipe_from_dict({}).drafter) is kinds.KINDS[DEFAULT_KIND].config
    assert type(Recipe().drafter) is kinds.KINDS[DEFAULT_KIND].config
