"""Adding a drafter kind = its model file, its task file, its recipe, its tests and ONE registry
entry. A toy kind declared in a temporary module (outside the package) is trained, loaded by
`--draft`, evaluated, exported (hf) and carded without any other file of draftsmith knowing it."""

import json
import sys
import textwrap

import pytest

from draftsmith import kinds

TOY_MODULE = '''
"""A toy kind: the draft LM's model, recipe section and task under another name."""
import dataclasses

from draftsmith.models.draft_lm import DraftLM
from draftsmith.train.config import DraftLMConfig
from draftsmith.train.draft_lm import DraftLMTask


class ToyDrafter(DraftLM):
    kind = "toy"


@dataclasses.dataclass
class ToyConfig(DraftLMConfig):
    kind: str = "toy"


class ToyTask(DraftLMTask):
    kind = "toy"
'''


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    (tmp_path / "toy_kind_module.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = kinds.Kind(
        "toy",
        "toy_kind_module:ToyDrafter",
        "toy_kind_module:ToyConfig",
        "toy_kind_module:ToyTask",
        exports={"hf": None},
        repo_suffix="toy",
        title="a toy drafter",
        tag="toy",
        paper="a test of the registry",
        causal_lm=True,
    )
    monkeypatch.setitem(kinds.KINDS, "toy", entry)
    yield entry
    sys.modules.pop("toy_kind_module", None)


def test_a_kind_declared_once_trains_evaluates_exports_and_cards(toy_kind, tmp_path, tiny_cache, fresh_accelerate):
    from draftsmith.cli import main
    from draftsmith.export import check, export
    from draftsmith.hub import build_card
    from draftsmith.models import read_drafter_meta

    run = tmp_path / "run"
    rc = main(
        [
            "train",
            "configs/tiny/draft_lm.yaml",
            "--drafter.kind=toy",
            "--output-dir",
            str(run),
            "--optim.max_steps=2",
            "--logging.eval_every=0",
            "--logging.acceptance_prompts=0",
            "--logging.progress=false",
            "--checkpoint.save_every=0",
        ]
    )
    assert rc == 0
    final = run / "final"
    assert read_drafter_meta(final)["kind"] == "toy"

    out = tmp_path / "eval.json"
    rc = main(
        ["eval", "--target", "tiny-random", "--draft", str(final), "--quiet", "--num-prompts", "1",
         "--max-new-tokens", "6", "-k", "2", "--json", str(out)]
    )  # fmt: skip
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["drafts"] > 0 and result["mean_acceptance_length"] >= 1.0

    exported = export(final, "hf", tmp_path / "hf")
    assert check(exported, "hf", "toy") == []
    assert read_drafter_meta(exported)["kind"] == "toy"

    card = build_card(final, [json.loads(out.read_text())])
    assert "a toy drafter" in card and "toy" in card.split("---\n")[1]


def test_the_registry_resolves_its_references_lazily():
    entry = kinds.KINDS["eagle3"]
    assert isinstance(entry.drafter_ref, str) and ":" in entry.drafter_ref
    assert entry.drafter.__name__ == "Eagle3"
    assert entry.layout("vllm").method == "eagle3"
    assert entry.layout("hf").model_type == "draftsmith_eagle3"
    with pytest.raises(Exception, match="no gguf export for 'medusa'"):
        kinds.KINDS["medusa"].layout("gguf")


def test_every_reference_in_the_registry_resolves():
    for kind in kinds.KINDS.values():
        assert kind.drafter is not None
        if kind.trainable:
            assert kind.config is not None and kind.task is not None
            assert kind.config().kind == kind.name  # the recipe's drafter.kind default names the kind
        for fmt in kind.exports:
            lay = kind.layout(fmt)
            assert fmt == "hf" or lay is not None, f"{kind.name}: {fmt} has no layout"


def test_every_kind_s_task_is_a_training_task():
    from draftsmith.train.task import TrainingTask

    for kind in kinds.KINDS.values():
        if kind.trainable:
            for member in ("trainable_parameters", "loss", "save", "runtime_drafter"):
                assert callable(getattr(kind.task, member, None)), f"{kind.name}'s task has no {member}"
            assert kind.task.kind == kind.name
    assert isinstance(TrainingTask, type)
