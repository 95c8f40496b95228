"""Adding a drafter kind = its model file, its task file (with its recipe dataclass), its smoke
recipe and ONE registry entry. A copy of the package gets a toy kind that way, and a subprocess
with only that copy on its path runs the layer guards (tests/test_layers.py), every contract
(tests/test_contract.py) and train -> eval -> export hf -> card on the toy kind: no other file of
draftsmith knows it."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import test_contract

from draftsmith import kinds

TESTS = pathlib.Path(__file__).resolve().parent
# what a new kind writes, relative to the copy's root (tmp/draftsmith is the installed package)
TOY_FILES = {
    "draftsmith/models/toy.py": '''
        """A toy kind: the draft LM's runtime drafter under another name."""
        from .draft_lm import DraftLM


        class ToyDrafter(DraftLM):
            kind = "toy"
        ''',
    "draftsmith/train/tasks/toy.py": '''
        """The toy kind's recipe section and training task: the draft LM's, under another name."""
        import dataclasses

        from .draft_lm import DraftLMTask, DraftLMTrainConfig


        @dataclasses.dataclass
        class ToyConfig(DraftLMTrainConfig):
            kind: str = "toy"


        class ToyTask(DraftLMTask):
            kind = "toy"
        ''',
}
TOY_ENTRY = """
KINDS["toy"] = Kind(
    "toy",
    "draftsmith.models.toy:ToyDrafter",
    "draftsmith.train.tasks.toy:ToyConfig",
    "draftsmith.train.tasks.toy:ToyTask",
    exports={"hf": None},
    repo_suffix="toy",
    title="a toy drafter",
    tag="toy",
    paper="a test of the registry",
    causal_lm=True,
    tiny_ref="draftsmith.testing:from_tiny_recipe",
)
"""


def copy_with_a_toy_kind(root: pathlib.Path) -> pathlib.Path:
    """The package as pyproject's package-dir installs it (draftsmith/{.,models,infer,train}) and
    the recipes, plus the toy kind's files and its registry entry."""
    from draftsmith.testing import configs_dir

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    pkg = root / "draftsmith"
    shutil.copytree(TESTS.parent / "draftsmith", pkg, ignore=ignore)
    for sub in ("models", "infer", "train"):
        shutil.copytree(TESTS.parent / sub, pkg / sub, ignore=ignore)
    shutil.copytree(configs_dir() / "tiny", root / "configs" / "tiny", ignore=ignore)
    for rel, text in TOY_FILES.items():
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    recipe = (root / "configs" / "tiny" / "draft_lm.yaml").read_text().replace("kind: draft_lm", "kind: toy")
    (root / "configs" / "tiny" / "toy.yaml").write_text(recipe)
    with open(pkg / "kinds.py", "a") as f:
        f.write(TOY_ENTRY)
    return root


def test_a_kind_added_in_a_copy_of_the_package_passes_the_guards_and_contracts(tmp_path):
    root = copy_with_a_toy_kind(tmp_path / "copy")
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("DRAFTSMITH_CONFIGS", None)  # the copy's own recipes, with the toy's
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--rootdir", str(TESTS.parent)]
    argv += [str(TESTS / f) for f in ("test_layers.py", "test_contract.py", "test_new_kind.py")]
    argv += ["-k", "test_layers or toy"]  # the guards, and every test of the toy kind
    # run from the copy: the working directory comes first on sys.path
    r = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, out
    passed = {line.split("::")[-1] for line in r.stdout.splitlines() if line.startswith("PASSED ")}
    contracts = {n for n in dir(test_contract) if n.startswith("test_")}
    assert {f"{n}[toy]" for n in contracts} <= passed, out
    assert "test_the_toy_kind_trains_evaluates_exports_and_cards" in passed, out


def test_the_toy_kind_trains_evaluates_exports_and_cards(tmp_path, tiny_cache, fresh_accelerate):
    """Runs where the registry knows a toy kind: in the copy above."""
    if "toy" not in kinds.KINDS:
        pytest.skip("runs in the package copy of the test above")
    from draftsmith.cli import main
    from draftsmith.models import read_drafter_meta
    from draftsmith.shipping.export import check, export
    from draftsmith.shipping.hub import build_card
    from draftsmith.testing import configs_dir

    assert kinds.__file__.startswith(str(pathlib.Path(os.environ["PYTHONPATH"]))), kinds.__file__
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            str(configs_dir() / "tiny" / "toy.yaml"),
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
    from draftsmith.train.tasks.base import TrainingTask

    for kind in kinds.KINDS.values():
        if kind.trainable:
            for member in ("trainable_parameters", "loss", "save", "runtime_drafter"):
                assert callable(getattr(kind.task, member, None)), f"{kind.name}'s task has no {member}"
            assert kind.task.kind == kind.name
    assert isinstance(TrainingTask, type)
