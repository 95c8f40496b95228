"""Every recipe loads; the real-target recipes resolve and build on the meta device with no network.

The parameter counts below are worked out by hand from each target's public config.json (shipped
under configs/<target>/config.json), not read back from the code:

    Llama layer   = q d*H*hd + k,v 2*d*KV*hd + o H*hd*d + MLP 3*d*ffn + 2 norms d
    Qwen3 layer   = the same + q_norm and k_norm (hd each)
"""

from __future__ import annotations

import pathlib
import socket
import warnings

import pytest
import yaml

from draftsmith.plan import build_meta
from draftsmith.train.config import load_recipe

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECIPES = sorted(p for p in (ROOT / "configs").glob("*/*.yaml") if p.parent.name != "accelerate")


def llama_layer(d, ffn, H, KV, hd, qk_norm=False):
    return d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * ffn + 2 * d + (2 * hd if qk_norm else 0)


# Targets: embedding + layers + final norm + (untied) LM head.
LLAMA_8B = 2 * 128256 * 4096 + 32 * llama_layer(4096, 14336, 32, 8, 128) + 4096
LLAMA_70B = 2 * 128256 * 8192 + 80 * llama_layer(8192, 28672, 64, 8, 128) + 8192
QWEN3_8B = 2 * 151936 * 4096 + 36 * llama_layer(4096, 12288, 32, 8, 128, qk_norm=True) + 4096
LLAMA_1B = 128256 * 2048 + 16 * llama_layer(2048, 8192, 32, 8, 64) + 2048  # tied embeddings


def eagle3(d, ffn, H, KV, hd, vocab=32000, qk_norm=False):
    """fc over 3 target layers, one decoder layer whose attention reads [embedding; hidden] (2d wide),
    its LM head over the draft vocabulary, 4 norms (hidden, input, post-attention, final)."""
    attn_in = 2 * d
    layer = attn_in * H * hd + 2 * attn_in * KV * hd + H * hd * d + 3 * d * ffn
    return 3 * d * d + layer + vocab * d + 4 * d


def dflash(d, ffn, H, KV, hd, layers, target_layers):
    """fc over the target layers, `layers` Qwen3-style decoder layers (q/k norms), 2 norms (features, final)."""
    return target_layers * d * d + layers * llama_layer(d, ffn, H, KV, hd, qk_norm=True) + 2 * d


MEDUSA_8B = 3 * (4096 * 4096 + 4096 + 128256 * 4096)  # 3 heads: ResBlock (weight + bias) + own unembedding

NEW = {
    "llama-3.1-8b-instruct/eagle3.yaml": (LLAMA_8B, eagle3(4096, 14336, 32, 8, 128)),
    "llama-3.1-8b-instruct/dflash.yaml": (LLAMA_8B, dflash(4096, 14336, 32, 8, 128, 5, 5)),
    "llama-3.1-8b-instruct/draft_lm.yaml": (LLAMA_8B, LLAMA_1B),
    "llama-3.1-8b-instruct/medusa.yaml": (LLAMA_8B, MEDUSA_8B),
    "qwen3-8b/eagle3.yaml": (QWEN3_8B, eagle3(4096, 12288, 32, 8, 128)),
    "qwen3-8b/dflash.yaml": (QWEN3_8B, dflash(4096, 12288, 32, 8, 128, 5, 5)),
    "llama-3.3-70b-instruct/eagle3.yaml": (LLAMA_70B, eagle3(8192, 28672, 64, 8, 128)),
}


def test_every_recipe_loads():
    assert len(RECIPES) >= 20
    for path in RECIPES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a shipped recipe writes no deprecated key
            recipe = load_recipe(path)
        assert recipe.drafter.kind, path


def test_hand_numbers_match_the_published_sizes():
    # Meta's and Qwen's model cards: 8.03B, 70.6B, 8.19B, 1.24B parameters.
    assert (round(LLAMA_8B / 1e7), round(LLAMA_70B / 1e8), round(QWEN3_8B / 1e7), round(LLAMA_1B / 1e7)) == (
        803,
        706,
        819,
        124,
    )


@pytest.mark.parametrize("name", sorted(NEW))
def test_real_target_recipe_builds_on_the_meta_device_offline(name, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a meta-device build must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    recipe = load_recipe(ROOT / "configs" / name)
    built = build_meta(recipe, "cuda")
    target, drafter = NEW[name]
    assert (built.target_params, built.drafter_params) == (target, drafter)
    assert recipe.optim.mixed_precision == "bf16"


@pytest.mark.parametrize("name", sorted(NEW))
def test_real_target_recipe_header(name):
    """Source named; one-node launch with --num_processes, the SLURM launch, and the plan's line pasted."""
    path = ROOT / "configs" / name
    text = path.read_text()
    head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "accelerate launch --num_processes 8 --config_file configs/accelerate/" in head
    assert f"-m draftsmith.train configs/{name}" in head
    assert "scripts/slurm_train.sh configs/accelerate/multinode_" in head and f"configs/{name}" in head
    assert f"draftsmith plan configs/{name}" in head
    assert "#   plan: " in head  # the summary `draftsmith plan` printed for it
    assert "Source:" in head
    target = load_recipe(path).model.target
    shipped = yaml.safe_load((path.parent / "config.json").read_text())  # JSON is YAML
    assert shipped["model_type"] in ("llama", "qwen3") and "/" in target


def test_shipped_configs_are_only_config_json():
    from draftsmith.models.sources import CONFIGS_DIR, KNOWN_CONFIGS

    for hub_id, folder in KNOWN_CONFIGS.items():
        files = {p.name for p in (CONFIGS_DIR / folder).iterdir() if p.suffix != ".yaml"}
        assert files == {"config.json"}, (hub_id, files)


def test_accelerate_configs_leave_the_process_count_to_the_user():
    """A config a user launches on their own number of GPUs must not pin it (accelerate then
    refuses to start without --num_processes instead of silently running 2)."""
    for name in ("ddp", "zero2", "zero3", "fsdp", "multinode_ddp", "multinode_zero3"):
        path = ROOT / "configs" / "accelerate" / f"{name}.yaml"
        cfg = yaml.safe_load(path.read_text())
        assert "num_processes" not in cfg, name
        assert "--num_processes" in path.read_text(), name
    assert yaml.safe_load((ROOT / "configs" / "accelerate" / "single.yaml").read_text())["num_processes"] == 1


@pytest.mark.parametrize("name", [n for n in NEW if n.split("/")[0] in ("llama-3.1-8b-instruct", "qwen3-8b")])
def test_whole_target_gpu_recipes_choose_best_by_measured_acceptance(name):
    """With the whole target loaded, τ is measured during training, so best/ is not simply final/."""
    r = load_recipe(ROOT / "configs" / name)
    assert r.model.target_parts == "whole" and r.logging.acceptance_prompts > 0
    from draftsmith.plan import make_plan

    steps = make_plan(r, gpus=8).steps  # the recipe's epochs of its data on the 8 GPUs its launch line names
    assert 0 < r.logging.acceptance_every < steps, name


def test_the_json_schema_accepts_every_shipped_recipe_and_refuses_what_the_loader_refuses():
    """json_schema() is written from the annotations the loader checks: each recipe under configs/
    passes it, and an unknown key, a value out of bounds and a choice not offered fail it."""
    jsonschema = pytest.importorskip("jsonschema")
    from draftsmith.train.config import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for path in RECIPES:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, f"{path.relative_to(ROOT)}: {errors[:2]}"
    for bad in (
        {"optim": {"lr": 3e-4, "max_step": 10}},  # unknown key
        {"logging": {"eval_every": -5}},  # below its bound
        {"optim": {"betas": [0.9, 1.0]}},  # an item outside [0, 1)
        {"optim": {"mixed_precision": "fp8"}},  # not one of the choices
        {"drafter": {"kind": "medusa", "num_heads": 0}},  # the kind's own bound
        {"drafter": {"kind": "medusa", "ttt_steps": 3}},  # another kind's key
    ):
        assert not validator.is_valid(bad), bad


def test_bounds_live_on_the_fields():
    """A knob's range is read from its annotation: the reference's spec, the error's wording."""
    from draftsmith.errors import DraftsmithError
    from draftsmith.train import config
    from draftsmith.train.config import recipe_from_dict

    assert config.ranges(config.CheckpointConfig)["save_every"] == ">=0 (0: only at the end)"
    assert config.ranges(config.OptimConfig)["betas"] == "[0, 1)"
    assert config.ranges(config.DataConfig)["seed"] == "[0, 4294967295]"
    with pytest.raises(DraftsmithError, match=r"^config key 'optim.betas' must be in \[0, 1\), got \[0.9, 1.5\]$"):
        recipe_from_dict({"optim": {"betas": [0.9, 1.5]}})
    with pytest.raises(DraftsmithError, match=r"^config key 'drafter.jsd_beta' must be in \(0, 1\), got 1.0$"):
        recipe_from_dict({"drafter": {"kind": "eagle3", "jsd_beta": 1.0}})
