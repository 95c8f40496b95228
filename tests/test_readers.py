"""A target loaded as its feature readers alone (model.target_parts readers, models/readers.py):
what it holds, what it refuses, and that training from a feature cache with it is the same run
as with the whole target."""

import json
import pathlib

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.models import Target
from draftsmith.train.config import load_recipe
from draftsmith.train.features import OfflineFeatures
from draftsmith.train.features import cli as features_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "tiny" / "eagle3.yaml"


@pytest.fixture(scope="module")
def readers(tiny_cache):
    return Target.load("tiny-random", dtype="float32", device="cpu", parts="readers")


def test_readers_hold_the_embedding_norm_and_head_only(readers, tiny_target):
    whole = tiny_target.model
    assert readers.parts == "readers" and tiny_target.parts == "whole"
    for get in (lambda m: m.get_input_embeddings().weight, lambda m: m.model.norm.weight,
                lambda m: m.get_output_embeddings().weight):  # fmt: skip
        assert torch.equal(get(readers.model), get(whole))
    held = {n: p for n, p in readers.model.named_parameters() if not p.is_meta}
    assert set(held) == {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    assert all(not p.requires_grad for p in held.values())
    assert all(p.is_meta for n, p in readers.model.named_parameters() if n not in held)  # the layers cost nothing
    assert (readers.vocab_size, readers.dtype, readers.device.type) == (tiny_target.vocab_size, torch.float32, "cpu")
    with pytest.raises(DraftsmithError, match="model.target_parts: whole"):
        readers.model(input_ids=torch.tensor([[1, 2, 3]]))


def test_a_checkpoint_without_the_readers_is_named(tiny_cache, tmp_path):
    from draftsmith.models.sources import resolve_model

    folder = tmp_path / "no-weights"
    folder.mkdir()
    src = pathlib.Path(resolve_model("tiny-random").path)
    for f in src.iterdir():  # everything but the weights
        if f.suffix != ".safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    with pytest.raises(DraftsmithError, match="model.safetensors"):
        Target.load(str(folder), dtype="float32", device="cpu", parts="readers")


def test_training_from_a_cache_with_the_readers_is_the_whole_targets_run(
    tiny_cache, tmp_path, fresh_accelerate, readers, tiny_target
):
    from draftsmith.train.trainer.loop import train

    quick = ["--data.max_rows=24", "--data.max_length=64", "--logging.progress=false"]
    cache = tmp_path / "feats"
    assert features_cli.main([str(RECIPE), "--output", str(cache), *quick]) == 0

    # The cache opens for both loads (the readers' hash matches; the whole-weights hash is skipped).
    rows = None
    for target in (tiny_target, readers):
        from draftsmith.train.data import build_data

        recipe = load_recipe(RECIPE, [*quick, f"--drafter.features={cache}"])
        rows = rows or build_data(recipe.data, target.tokenizer, progress=False).train
        OfflineFeatures(cache, target, (2, 4, 5, -1), 64, rows)

    runs = {}
    for parts in ("whole", "readers"):
        fresh_accelerate_state()
        recipe = load_recipe(
            RECIPE,
            [
                *quick,
                f"--drafter.features={cache}",
                f"--model.target_parts={parts}",
                "--optim.max_steps=3",
                "--optim.batch_size=4",
                "--logging.log_every=1",
                "--logging.eval_every=0",
                "--logging.acceptance_prompts=0",
                "--checkpoint.save_every=0",
                f"--checkpoint.output_dir={tmp_path / parts}",
            ],
        )
        summary = train(recipe)
        runs[parts] = [h["train/loss"] for h in summary["history"] if "train/loss" in h]
        assert (tmp_path / parts / "final" / "drafter.json").is_file()
    assert len(runs["whole"]) == 3
    assert runs["readers"] == runs["whole"], runs  # the same computation, bit for bit
    meta = json.loads((tmp_path / "readers" / "final" / "drafter.json").read_text())
    assert meta["kind"] == "eagle3"


def fresh_accelerate_state():
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
