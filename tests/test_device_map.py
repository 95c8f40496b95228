"""A target spread over GPUs (models/placement.py): the choice between one GPU, a split and "does
not fit" with stand-in GPU counts and memories, the placement a report states, and the engine
decoding a tiny target loaded through a device map (accelerate's hooks) as plain decoding does."""

from __future__ import annotations

import pytest
import torch

from draftsmith.cli import build_parser, main
from draftsmith.errors import DraftsmithError
from draftsmith.infer.engine import Engine
from draftsmith.models import Target
from draftsmith.models.placement import (
    CAVEAT,
    WEIGHT_SHARE,
    choose_fit,
    count_weight_bytes,
    describe_placement,
    plan_device_map,
)

GB = 10**9


def test_fits_one_gpu():
    fit = choose_fit(16 * GB, {0: 80 * GB, 1: 80 * GB}, None, "m", "bfloat16")
    assert (fit.kind, fit.gpus) == ("one", (0,))


def test_too_big_for_one_gpu_splits_over_all():
    """Llama-3.3-70B in bf16 (141 GB) on two H200s (143 GB free each)."""
    fit = choose_fit(141 * GB, {0: 143 * GB, 1: 143 * GB}, None, "llama-70b", "bfloat16")
    assert fit.kind == "split" and fit.gpus == (0, 1)
    assert fit.budget == {0: int(143 * GB * WEIGHT_SHARE), 1: int(143 * GB * WEIGHT_SHARE)}


def test_balanced_splits_even_when_one_gpu_holds_it():
    fit = choose_fit(16 * GB, {0: 80 * GB, 1: 80 * GB}, "balanced", "m", "bfloat16")
    assert fit.kind == "split" and fit.gpus == (0, 1)


def test_fits_no_combination_names_the_numbers():
    with pytest.raises(DraftsmithError) as e:
        choose_fit(141 * GB, {0: 80 * GB, 1: 75 * GB}, None, "llama-70b", "bfloat16")
    msg = str(e.value)
    assert "llama-70b" in msg and "141.0 GB in bfloat16" in msg and "155.0 GB free" in msg
    assert "cuda:0 80.0 GB" in msg and "cuda:1 75.0 GB" in msg and "90%" in msg


def test_tight_on_its_only_gpu_loads_whole():
    """Within the GPU's free memory but not its 90% share, with nowhere to split to: loaded whole,
    as before the check existed (the KV cache may not fit, but the check does not refuse it)."""
    fit = choose_fit(76 * GB, {0: 80 * GB}, None, "m", "bfloat16")
    assert (fit.kind, fit.gpus) == ("one", (0,))
    fit = choose_fit(76 * GB, {0: 80 * GB, 1: 80 * GB}, None, "m", "bfloat16", gpu=1, split_ok=False)
    assert (fit.kind, fit.gpus) == ("one", (1,))
    assert choose_fit(76 * GB, {0: 80 * GB, 1: 80 * GB}, None, "m", "bfloat16").kind == "split"


def test_named_gpu_is_not_split():
    with pytest.raises(DraftsmithError, match="--device-map auto"):
        choose_fit(150 * GB, {0: 143 * GB, 1: 143 * GB}, None, "m", "bfloat16", gpu=1, split_ok=False)


def test_no_gpu_is_one_line():
    with pytest.raises(DraftsmithError, match="none is visible"):
        choose_fit(GB, {}, "auto", "m", "bfloat16")


@pytest.fixture
def gpus(monkeypatch):
    """Stand-in CUDA GPUs: set `free` (bytes per GPU) on the returned dict."""
    free: dict[int, int] = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(free))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (free[i], 2 * free[i]))
    return free


def _tiny_weights() -> int:
    from draftsmith.models.sources import meta_causal_lm

    return count_weight_bytes(meta_causal_lm("tiny-random", torch.float32), torch.float32)


def test_plan_one_gpu_when_it_fits(tiny_cache, gpus):
    gpus.update({0: 10 * _tiny_weights(), 1: 10 * _tiny_weights()})
    device, device_map = plan_device_map("tiny-random", torch.float32, torch.device("cuda"), None)
    assert device == torch.device("cuda", 0) and device_map is None


@pytest.mark.parametrize("mode", [None, "auto", "balanced"])
def test_plan_splits_layers_head_beside_embedding(tiny_cache, gpus, mode):
    """0.7 of the weights per GPU: neither holds it, the two do; the LM head sits with the
    embedding (the drafter borrows both on target.device)."""
    w = _tiny_weights()
    gpus.update({0: int(0.7 * w / WEIGHT_SHARE), 1: int(0.7 * w / WEIGHT_SHARE)})
    device, device_map = plan_device_map("tiny-random", torch.float32, torch.device("cuda"), mode)
    assert device == torch.device("cuda", 0)
    assert set(device_map.values()) == {0, 1}
    assert device_map["lm_head"] == device_map.get("model.embed_tokens", device_map.get("model")) == 0
    layers = [d for name, d in device_map.items() if name.startswith("model.layers.")]
    assert layers == sorted(layers) and 1 in layers  # in order: one hop from GPU 0 to GPU 1


def test_plan_too_big_and_no_gpu(tiny_cache, gpus, monkeypatch):
    w = _tiny_weights()
    gpus.update({0: w // 4, 1: w // 4})
    with pytest.raises(DraftsmithError, match="more than the 2 visible GPUs hold"):
        plan_device_map("tiny-random", torch.float32, torch.device("cuda"), "auto")
    with pytest.raises(DraftsmithError, match="names one device"):
        plan_device_map("tiny-random", torch.float32, torch.device("cpu"), "auto")
    gpus.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DraftsmithError, match="none is visible"):
        plan_device_map("tiny-random", torch.float32, torch.device("cpu"), "balanced")


def test_placement_description():
    assert describe_placement(["cuda:0"] * 4, "cuda:0", "cuda:0") is None
    p = describe_placement(["cuda:0"] * 38 + ["cuda:1"] * 42, "cuda:0", "cuda:0")
    assert p["devices"] == ["cuda:0", "cuda:1"]
    assert p["layers_per_device"] == {"cuda:0": 38, "cuda:1": 42}
    assert p["caveat"] == CAVEAT and "one GPU at a time" in CAVEAT
    assert "serve-bench --tensor-parallel-size" in CAVEAT
    assert describe_placement(["meta"] * 4, "cpu", "cpu") is None  # a readers-only target's layers


def test_a_split_target_is_stated_in_the_bench_json_and_table(tiny_target, monkeypatch):
    from draftsmith.evaluation.bench import environment, placement_line

    assert environment(tiny_target, None)["placement"] is None  # one device: nothing to state
    p = describe_placement(["cuda:0"] * 38 + ["cuda:1"] * 42, "cuda:0", "cuda:0")
    monkeypatch.setattr(tiny_target, "placement", p, raising=False)
    assert environment(tiny_target, None)["placement"] == p
    line = placement_line(p)
    assert line.startswith("placement: cuda:0 38 layers, cuda:1 42 layers;") and CAVEAT in line


def _device_map(target) -> dict:
    n = target.config.num_hidden_layers
    layers = {f"model.layers.{i}": "cpu" for i in range(n)}
    return {"model.embed_tokens": "cpu", **layers, "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


def _eagle3(target):
    from draftsmith.models.eagle import EagleConfig
    from draftsmith.models.eagle3 import Eagle3, Eagle3Config, Eagle3Model, default_aux_layers

    torch.manual_seed(0)
    fields = EagleConfig.layer_fields(target.config)
    aux = default_aux_layers(target.config.num_hidden_layers)
    cfg = Eagle3Config(vocab_size=target.vocab_size, draft_vocab_size=100, hidden_layers=aux, target="tiny", **fields)
    model = Eagle3Model(cfg)
    model.set_vocab(torch.randperm(target.vocab_size)[:100].sort().values, target.model.get_output_embeddings())
    return Eagle3(model.float(), target, "test-eagle3")


def test_engine_on_a_dispatched_target_decodes_as_plain(tiny_target):
    """The split path on CPU: accelerate's hooks on every module (force_hooks: one device would
    get none), the cache argument left alone, hidden states and logits brought to target.device.
    Greedy output equals plain decoding, with and without an EAGLE-3 drafter (hidden states)."""
    from accelerate import dispatch_model

    from draftsmith.models.sources import load_causal_lm

    model = load_causal_lm("tiny-random", torch.float32, "cpu")
    dispatch_model(model, _device_map(tiny_target), force_hooks=True, skip_keys=model._skip_keys_device_placement)
    split = Target(model, tiny_target.tokenizer, "tiny-random")
    assert any(hasattr(m, "_hf_hook") for m in split.model.modules())
    ids = tiny_target.tokenizer("The quick brown fox", verbose=False)["input_ids"]
    plain = Engine(tiny_target).generate(ids, 24, eos_token_ids=()).tokens
    assert Engine(split).generate(ids, 24, eos_token_ids=()).tokens == plain
    spec = Engine(split, _eagle3(split), 3).generate(ids, 24, eos_token_ids=())
    assert spec.tokens == plain


def test_target_load_with_a_device_map(tiny_cache, tiny_target):
    """Target.load's device_map goes through transformers' big-model loading."""
    split = Target.load("tiny-random", dtype="float32", device="cpu", device_map=_device_map(tiny_target))
    assert split.placement is None and split.device == torch.device("cpu")  # one device: nothing to state
    ids = tiny_target.tokenizer("hello world", verbose=False)["input_ids"]
    plain = Engine(tiny_target).generate(ids, 16, eos_token_ids=()).tokens
    assert Engine(split).generate(ids, 16, eos_token_ids=()).tokens == plain


def test_cli_flag(tiny_cache, capsys):
    args = build_parser().parse_args(["bench", "--draft", "prompt_lookup:3", "--device-map", "balanced"])
    assert args.device_map == "balanced"
    assert build_parser().parse_args(["eval", "--draft", "prompt_lookup:3"]).device_map is None
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "--device-map {auto,balanced}" in capsys.readouterr().out
    if not torch.cuda.is_available():  # no CPU fallback: one line
        assert main(["eval", "--target", "tiny-random", "--draft", "prompt_lookup:3", "--device-map", "auto"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "none is visible" in err[0]
