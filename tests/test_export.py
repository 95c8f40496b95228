"""Engine exports (draftsmith/export): every (kind, format) contract on checkpoints trained with
the tiny recipes -- config keys, weight names and shapes as vLLM / SGLang / transformers read
them, the lists in ../shared/FORMATS.md, what round-trips here (transformers' assistant_model,
our own loader), and clear errors."""

from __future__ import annotations

import argparse
import errno
import json
import os
import pathlib
import shutil

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine
from draftsmith.kinds import KINDS as REGISTRY
from draftsmith.models import load_drafter, read_drafter_meta, write_drafter_meta
from draftsmith.shipping.export import (
    EXPORT_META,
    FORMATS,
    add_arguments,
    check,
    default_repo_name,
    export,
    formats_for,
    hub_id,
    main,
    run,
)
from draftsmith.shipping.export import hf as hf_fmt
from draftsmith.shipping.export import sglang as sglang_fmt
from draftsmith.shipping.export import vllm as vllm_fmt
from draftsmith.shipping.export.common import layout, weight_shapes
from draftsmith.train.config import load_recipe

# Every kind that trains and has a tiny recipe (draftsmith/kinds.py): a new kind is covered by its entry.
KINDS = tuple(
    k.name for k in REGISTRY.values() if k.trainable and pathlib.Path(f"configs/tiny/{k.name}.yaml").is_file()
)
# gguf is written by llama.cpp's own converter (an engine install): tests/test_engines*.py cover it.
CASES = [(k, f) for k in KINDS for f in formats_for(k) if f != "gguf"]
QUICK = [
    "--optim.max_steps=2",
    "--optim.batch_size=4",
    "--data.max_rows=40",
    "--data.max_length=64",
    "--data.eval_rows=4",
    "--logging.eval_every=1000",
    "--logging.eval_batches=1",
    "--logging.acceptance_prompts=0",
    "--logging.progress=false",
    "--checkpoint.save_every=100",
]
# The tiny-random target: hidden 64, 8 layers, 4 heads, 2 KV heads (head_dim 16), MLP 128, vocab 259;
# configs/tiny/eagle3.yaml: a draft vocabulary of 128 and aux layers [2, 4, 5].
D, VOCAB, DRAFT_VOCAB, AUX = 64, 259, 128, [2, 4, 5]

# ../shared/FORMATS.md, restated: shared/ is not part of the repository CI checks out.
FORMATS_MD = {
    ("eagle3", "vllm"): {
        "keys": [
            "speculators_model_type",
            "transformer_layer_config",
            "speculators_config",
            "speculators_version",
            "draft_vocab_size",
            "target_hidden_size",
            "norm_before_residual",
            "eagle_aux_hidden_state_layer_ids",
        ],
        "speculators_config": ["algorithm", "proposal_methods", "default_proposal_method", "verifier"],
        "proposal_method": ["proposal_type", "speculative_tokens"],
        "verifier": ["name_or_path", "architectures"],
        "weights": ["d2t", "t2d"],
    },
    ("eagle", "vllm"): {"keys": ["architectures", "num_hidden_layers"], "values": {"num_hidden_layers": 1}},
    ("medusa", "vllm"): {
        "keys": ["model_type", "num_heads", "num_hidden_layers", "vocab_size"],
        "values": {"model_type": "medusa"},
    },
    ("eagle3", "sglang"): {
        "keys": [
            "architectures",
            "draft_vocab_size",
            "target_hidden_size",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "rms_norm_eps",
            "vocab_size",
        ],
        "values": {"architectures": ["LlamaForCausalLMEagle3"]},
        "weight_prefixes": ["fc.", "midlayer.", "norm.", "lm_head.", "d2t", "t2d"],
    },
}
MODULES = {"hf": hf_fmt, "vllm": vllm_fmt, "sglang": sglang_fmt}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tiny_cache):
    """One checkpoint per kind, trained for 2 steps with the tiny recipes."""
    from draftsmith.train.trainer.loop import train

    out = {}
    for kind in KINDS:
        folder = tmp_path_factory.mktemp(f"ckpt-{kind}")
        recipe = load_recipe(f"configs/tiny/{kind}.yaml", QUICK)
        recipe.checkpoint.output_dir = str(folder)
        train(recipe)
        out[kind] = folder / "final"
    return out


@pytest.fixture(scope="module")
def exports(ckpts, tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    return {(k, f): export(ckpts[k], f, root / f"{k}-{f}") for k, f in CASES}


def TINY_FOLDER() -> str:
    from draftsmith.models.sources import resolve_model

    return resolve_model("tiny-random").path


def _config(folder) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_formats_per_kind():
    assert FORMATS == ("hf", "vllm", "sglang", "gguf")
    assert formats_for("draft_lm") == ["hf", "vllm", "gguf"]  # llama.cpp: draft-simple
    assert formats_for("medusa") == ["hf", "vllm"]
    assert formats_for("eagle") == ["hf", "vllm"]
    assert formats_for("eagle3") == ["hf", "vllm", "sglang", "gguf"]  # llama.cpp: draft-eagle3
    with pytest.raises(DraftsmithError, match="exportable kinds"):
        formats_for("prompt_lookup")


@pytest.mark.parametrize("kind,fmt", CASES)
def test_config_has_the_engines_keys(exports, ckpts, kind, fmt):
    out = exports[(kind, fmt)]
    config = _config(out)
    assert check(out, fmt, kind) == []
    required = layout(kind, fmt).required_keys
    assert set(required) <= set(config)
    md = FORMATS_MD.get((kind, fmt), {})
    assert set(md.get("keys", [])) <= set(config)
    for key, value in md.get("values", {}).items():
        assert config[key] == value
    if (kind, fmt) == ("eagle3", "vllm"):
        spec = config["speculators_config"]
        assert set(md["speculators_config"]) <= set(spec)
        assert set(md["proposal_method"]) <= set(spec["proposal_methods"][0])
        assert set(md["verifier"]) <= set(spec["verifier"])
        assert spec["algorithm"] == config["speculators_model_type"] == "eagle3"
        assert spec["proposal_methods"][0]["speculative_tokens"] == REGISTRY[kind].default_k
        assert spec["verifier"]["name_or_path"] == TINY_FOLDER()  # no Hub id: draftsmith's local copy
        assert spec["verifier"]["architectures"] == ["LlamaForCausalLM"]
        assert "model_type" not in config  # else vLLM parses it with AutoConfig, not SpeculatorsConfig
        assert config["norm_before_residual"] is False  # vLLM's default (true) is not our layer
        assert config["transformer_layer_config"]["num_hidden_layers"] == 1
    meta = json.loads((out / EXPORT_META).read_text())
    # tiny-random has no Hub id: an engine cannot resolve the name, so the export names its folder.
    assert meta["format"] == fmt and meta["kind"] == kind and meta["verifier"] == TINY_FOLDER()
    assert str(out) in meta["serve"] and meta["checked_against"]
    if fmt != "hf":
        assert "tiny-random is not on the Hub" in meta["note"]
        commands = f"{meta['serve']} {meta.get('serve_explicit', '')}"
        assert (
            TINY_FOLDER() in commands and "serve tiny-random" not in commands and "--model tiny-random" not in commands
        )
    cap = REGISTRY[kind].k_limit  # the kind's default K, at most a capped kind's cap (Medusa: its 4 heads)
    limit = (_config(ckpts[kind]).get(cap) or read_drafter_meta(ckpts[kind]).get(cap)) if cap else None
    default = REGISTRY[kind].default_k
    assert meta["num_speculative_tokens"] == (min(default, int(limit)) if limit else default)
    if kind == "medusa":
        assert meta["num_speculative_tokens"] == 4


def _expected_names(kind, fmt, ckpt) -> set[str]:
    if fmt == "hf" or REGISTRY[kind].causal_lm:
        return set(weight_shapes(ckpt))  # the checkpoint's own layout
    if kind == "dflash":  # vLLM's and SGLang's DFlash read our names, without embedding or LM head
        return set(hf_fmt.dflash_shapes(_config(ckpt)))
    if fmt == "sglang":
        return set(sglang_fmt.WEIGHTS)
    if kind == "eagle3":
        return set(vllm_fmt.EAGLE3_WEIGHTS)
    if kind == "eagle":
        return set(vllm_fmt.EAGLE_WEIGHTS)
    return set(vllm_fmt.medusa_weight_names(4, 1, original_lm_head=False))


@pytest.mark.parametrize("kind,fmt", CASES)
def test_weight_names_shapes_and_values(exports, ckpts, kind, fmt):
    out, ckpt = exports[(kind, fmt)], ckpts[kind]
    shapes = weight_shapes(out)
    assert set(shapes) == _expected_names(kind, fmt, ckpt)
    # Heads borrow the target's embedding in every engine; a causal-LM draft (draft_lm, pard) has its own.
    assert not any("embed_tokens" in n for n in shapes) or REGISTRY[kind].causal_lm
    if kind in ("eagle", "eagle3", "medusa"):
        module = MODULES[fmt]
        engine_shapes = (
            module.expected_weights(_config(out)) if fmt == "sglang" else module.expected_weights(kind, _config(out))
        )
        assert shapes == {n: tuple(s) for n, s in engine_shapes.items()}
    if kind == "eagle3":
        layer = "midlayer." if fmt != "vllm" else "layers.0."
        assert shapes["fc.weight"] == (D, 3 * D)
        assert shapes["d2t"] == (DRAFT_VOCAB,) and shapes["t2d"] == (VOCAB,)
        assert shapes["lm_head.weight"] == (DRAFT_VOCAB, D)
        assert shapes[layer + "self_attn.q_proj.weight"] == (4 * 16, 2 * D)
        assert shapes[layer + "self_attn.k_proj.weight"] == (2 * 16, 2 * D)
        assert shapes[layer + "hidden_norm.weight"] == (D,)
    if kind == "eagle":
        assert shapes["fc.weight"] == (D, 2 * D)
        assert "lm_head.weight" not in shapes and "layers.0.input_layernorm.weight" not in shapes
    if (kind, fmt) == ("medusa", "vllm"):
        assert shapes["blocks.0.layers.0.weight"] == (D, D) and shapes["blocks.3.layers.0.bias"] == (D,)
        assert shapes["lm_heads.3.weight"] == (VOCAB, D)
    # Same numbers as the checkpoint, under the engine's names.
    mine, theirs = load_file(str(ckpt / "model.safetensors")), load_file(str(out / "model.safetensors"))
    for name, t in theirs.items():
        src = name
        if fmt == "vllm" and kind == "eagle3":
            src = name.replace("layers.0.", "midlayer.")
        if fmt == "vllm" and kind == "medusa":
            src = name.replace(".layers.", ".").replace(".weight", ".linear.weight").replace(".bias", ".linear.bias")
            src = name if name.startswith("lm_heads") else src
        assert torch.equal(t, mine[src]), name


def test_eagle3_layer_ids_mean_the_same_layers_in_both_engines(exports):
    v, s = _config(exports[("eagle3", "vllm")]), _config(exports[("eagle3", "sglang")])
    assert v["eagle_aux_hidden_state_layer_ids"] == AUX  # vLLM: the input of decoder layer i = hidden_states[i]
    assert s["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # SGLang: +1 (first id 1: every version)
    assert s["eagle_aux_hidden_state_layer_ids"] == AUX  # read first by vLLM, should it load this folder
    assert s["tie_word_embeddings"] is False and s["draft_vocab_size"] == DRAFT_VOCAB
    assert vllm_fmt.aux_layer_ids([-7, 4, 5], 8) == [2, 4, 5]
    with pytest.raises(DraftsmithError, match="0..7"):
        vllm_fmt.aux_layer_ids([2, 4, 8], 8)
    assert sglang_fmt.aux_layer_ids([2, 4, 5]) == [1, 3, 4]
    assert sglang_fmt.aux_layer_ids([3, 4, 6]) == [3, 4, 6]
    with pytest.raises(DraftsmithError, match="unambiguously"):
        sglang_fmt.aux_layer_ids([1, 4, 5])


def test_vllm_eagle3_config_is_a_full_llama_layer(exports, ckpts):
    from transformers import LlamaConfig

    config = _config(exports[("eagle3", "vllm")])
    ours = _config(ckpts["eagle3"])
    # What vLLM's SpeculatorsConfig builds: transformer_layer_config + the eagle3 fields.
    layer = LlamaConfig(**config["transformer_layer_config"])
    for name in (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "max_position_embeddings",
        "hidden_act",
    ):
        assert getattr(layer, name) == ours[name], name
    assert layer.vocab_size == VOCAB and layer.num_hidden_layers == 1 and not layer.tie_word_embeddings
    assert config["transformer_layer_config"]["rope_theta"] == ours["rope_parameters"]["rope_theta"]


def test_unsorted_aux_layers_reorder_the_fc_blocks(tiny_target, tmp_path):
    from draftsmith.models.eagle import EagleConfig
    from draftsmith.models.eagle3 import Eagle3Config, Eagle3Model

    torch.manual_seed(0)
    cfg = Eagle3Config(
        vocab_size=VOCAB,
        draft_vocab_size=VOCAB,
        hidden_layers=[5, 2, 4],
        target="tiny-random",
        **EagleConfig.layer_fields(tiny_target.config),
    )
    model = Eagle3Model(cfg)
    model.save_pretrained(tmp_path / "ckpt")
    write_drafter_meta(tmp_path / "ckpt", "eagle3", "tiny-random")
    out = export(tmp_path / "ckpt", "vllm", tmp_path / "out")
    assert _config(out)["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    fc = load_file(str(out / "model.safetensors"))["fc.weight"]
    old = model.fc.weight.detach().chunk(3, dim=1)  # blocks for layers 5, 2, 4
    assert torch.equal(fc, torch.cat([old[1], old[2], old[0]], dim=1))


def test_draft_lm_hf_export_is_a_transformers_assistant(exports, tiny_target):
    from transformers import AutoModelForCausalLM

    draft = AutoModelForCausalLM.from_pretrained(exports[("draft_lm", "hf")], dtype=torch.float32).eval()
    ids = torch.tensor([[5, 40, 41, 42, 43, 9, 12]])
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, eos_token_id=None)
    with torch.no_grad():
        plain = tiny_target.model.generate(ids, **kw)
        assisted = tiny_target.model.generate(ids, assistant_model=draft, **kw)
    assert plain.shape[1] > ids.shape[1]
    assert torch.equal(plain, assisted)
    # The vllm export is the same plain causal LM.
    assert set(weight_shapes(exports[("draft_lm", "vllm")])) == set(weight_shapes(exports[("draft_lm", "hf")]))
    assert _config(exports[("draft_lm", "vllm")])["architectures"] == ["LlamaForCausalLM"]


@pytest.mark.parametrize("kind", ["medusa", "eagle", "eagle3"])
def test_heads_hf_export_reloads_and_decodes_like_plain(exports, tiny_target, kind):
    drafter = load_drafter(str(exports[(kind, "hf")]), tiny_target)
    assert drafter.kind == kind
    engine = Engine(tiny_target, drafter, 3)
    prompt = [5, 40, 41, 42, 43, 9, 12]
    plain = engine.generate(prompt, 24, speculative=False, eos_token_ids=())
    spec = engine.generate(prompt, 24, eos_token_ids=())
    assert spec.tokens == plain.tokens
    assert spec.metrics.drafts > 0


def _vllm_medusa_logits(folder, hidden):
    """vLLM's Medusa forward (model_executor/models/medusa.py) on an exported folder."""
    cfg, w = _config(folder), load_file(str(folder / "model.safetensors"))
    out = []
    for k in range(cfg["num_heads"]):
        x = hidden
        for i in range(cfg["num_hidden_layers"]):
            bias = w[f"blocks.{k}.layers.{i}.bias"] if cfg["medusa_fc_bias"] else None
            x = x + F.silu(F.linear(x, w[f"blocks.{k}.layers.{i}.weight"], bias))
        out.append(F.linear(x, w["lm_heads.0.weight" if cfg["original_lm_head"] else f"lm_heads.{k}.weight"]))
    return torch.stack(out)


def test_vllm_medusa_computes_what_our_heads_compute(exports, ckpts, tiny_target, tmp_path):
    from draftsmith.models.medusa import MedusaHeads

    hidden = torch.randn(5, D, generator=torch.Generator().manual_seed(0))
    heads = MedusaHeads.from_pretrained(ckpts["medusa"]).float().eval()
    with torch.no_grad():
        assert torch.allclose(_vllm_medusa_logits(exports[("medusa", "vllm")], hidden), heads(hidden), atol=1e-5)
    # Heads sharing the target's LM head: vLLM cannot borrow it, so the export carries one copy;
    # -k 2 exports the first two heads only.
    torch.manual_seed(1)
    shared = MedusaHeads.from_target(tiny_target.model, num_heads=3, share_lm_head=True, target_name="tiny-random")
    for block in shared.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.3)
    shared.save_pretrained(tmp_path / "shared")
    write_drafter_meta(tmp_path / "shared", "medusa", "tiny-random")
    out = export(tmp_path / "shared", "vllm", tmp_path / "shared-vllm", num_speculative_tokens=2)
    cfg = _config(out)
    assert cfg["num_heads"] == 2 and cfg["original_lm_head"] is True
    assert set(weight_shapes(out)) == set(vllm_fmt.medusa_weight_names(2, 1, original_lm_head=True))
    with torch.no_grad():
        assert torch.allclose(_vllm_medusa_logits(out, hidden), shared(hidden, 2), atol=1e-5)


def test_hf_export_leaves_training_state_behind(ckpts, tmp_path):
    src = tmp_path / "step"
    shutil.copytree(ckpts["eagle"], src)
    (src / "training_state").mkdir()
    (src / "training_state" / "optimizer.bin").write_bytes(b"x")
    (src / "trainer_state.json").write_text("{}")
    out = export(src, "hf", tmp_path / "out")
    assert not (out / "training_state").exists() and not (out / "trainer_state.json").exists()
    assert (out / "drafter.json").is_file() and (out / "tokenizer.json").is_file()


def _fake(folder, kind, target="tiny-random"):
    folder.mkdir(parents=True)
    write_drafter_meta(folder, kind, target)
    return folder


def test_errors_are_one_clear_line_and_leave_nothing_behind(tmp_path, ckpts):
    def refuses(match, *a, **kw):
        with pytest.raises(DraftsmithError, match=match):
            export(*a, **kw)

    refuses("no such checkpoint folder", tmp_path / "missing", "hf", tmp_path / "o1")
    (tmp_path / "plain").mkdir()
    refuses("not a draftsmith checkpoint", tmp_path / "plain", "hf", tmp_path / "o2")
    run_dir = tmp_path / "run"
    _fake(run_dir / "final", "eagle")
    refuses("run/final/config.json is missing", run_dir, "vllm", tmp_path / "o3")  # the run folder -> its final/
    draft = _fake(tmp_path / "draft", "draft_lm")
    refuses(
        "format 'sglang' does not apply to a draft_lm checkpoint; formats for draft_lm: hf, vllm",
        draft,
        "sglang",
        tmp_path / "o4",
    )
    refuses("unknown export format 'onnx'; formats: hf, vllm, sglang", draft, "onnx", tmp_path / "o5")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("keep me")
    refuses("not an empty folder", ckpts["eagle3"], "vllm", busy)
    assert (busy / "x").read_text() == "keep me"
    refuses(
        r"-k/--num-speculative-tokens 9: this medusa checkpoint \(num_heads=4\) drafts at most 4 tokens per step",
        ckpts["medusa"],
        "vllm",
        tmp_path / "o6",
        num_speculative_tokens=9,
    )
    bad = tmp_path / "eagle-mid"
    shutil.copytree(ckpts["eagle"], bad)
    cfg = _config(bad)
    cfg["hidden_layers"] = [3]
    (bad / "config.json").write_text(json.dumps(cfg))
    refuses("final \\(normed\\) hidden state", bad, "vllm", tmp_path / "o7")
    assert not list(tmp_path.glob(".*export-*"))  # no half-written temp folders
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 8))
    # An empty output folder is fine (and replaced by the export).
    (tmp_path / "empty").mkdir()
    assert (export(ckpts["eagle"], "hf", tmp_path / "empty") / "config.json").is_file()


def test_repo_names_carry_the_method_and_hub_ids(tmp_path):
    assert hub_id("smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert hub_id("qwen2.5-coder-0.5b-instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert hub_id("qwen2.5-coder-1.5b-instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert hub_id("tiny-random") is None
    assert hub_id("org/Some-Model") == "org/Some-Model"
    assert hub_id(str(tmp_path)) is None and hub_id("./model.gguf") is None
    names = {kind: default_repo_name(_fake(tmp_path / kind, kind, "smollm2-135m-instruct")) for kind in KINDS}
    assert names["eagle3"] == "SmolLM2-135M-Instruct-eagle3"
    assert names["medusa"] == "SmolLM2-135M-Instruct-medusa"
    assert names["draft_lm"] == "SmolLM2-135M-Instruct-draft"
    # vLLM reads EAGLE-1 from "eagle-" in the name, EAGLE-3 from "eagle3".
    assert "eagle-" in names["eagle"].lower() and "eagle3" not in names["eagle"].lower()
    assert "eagle-" not in names["eagle3"].lower()
    assert default_repo_name(_fake(tmp_path / "t", "eagle3", "tiny-random")) == "tiny-random-eagle3"
    assert default_repo_name(_fake(tmp_path / "h", "medusa", "org/Some-Model")) == "Some-Model-medusa"


def test_command_line(ckpts, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [str(ckpts["eagle3"]), "--format", "sglang", "--output-dir", str(tmp_path / "o"), "-k", "5"]
    )
    assert run(args) == 0
    printed = capsys.readouterr().out
    assert "--speculative-algorithm EAGLE3" in printed and "--speculative-num-steps 5" in printed
    assert json.loads((tmp_path / "o" / EXPORT_META).read_text())["num_speculative_tokens"] == 5
    assert main([str(ckpts["draft_lm"]), "--format", "sglang", "--output-dir", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftsmith: error: format 'sglang' does not apply") and err.count("\n") == 1


# --- a full disk, a read-only folder --------------------------------------------------------------


def _no_room(code):
    def write(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(args[-1]) if args else None)

    return write


@pytest.mark.parametrize("fmt", ["vllm", "hf"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_failed_write_is_one_line_and_leaves_nothing_that_looks_complete(ckpts, tmp_path, monkeypatch, fmt, code):
    """vllm writes its weights with safetensors, hf copies the checkpoint's files: either failing
    with a full disk or a read-only folder is one line naming the folder, and no folder is left."""
    if fmt == "vllm":
        monkeypatch.setattr(vllm_fmt, "save_weights", _no_room(code))
    else:
        monkeypatch.setattr(hf_fmt.shutil, "copy2", _no_room(code))
    out = tmp_path / "out"
    with pytest.raises(DraftsmithError) as e:
        export(ckpts["eagle"], fmt, out)
    message = str(e.value)
    assert "\n" not in message and f"--output-dir {out}:" in message
    assert "nothing at" in message and "looks like a finished export" in message
    assert ("the disk is full" in message) == (code == errno.ENOSPC)
    assert not out.exists() and not list(tmp_path.glob(".*export-*"))


def test_safetensors_write_errors_become_os_errors(tmp_path, monkeypatch):
    """safetensors reports a failed write as its own error type; save_weights turns it into the
    OSError export handles (errno kept), and leaves other errors as they are."""
    import safetensors.torch

    from draftsmith.shipping.export.common import save_weights

    def full(*args, **kwargs):
        raise safetensors.SafetensorError("Error while serializing: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(OSError) as e:
        save_weights({"w": torch.zeros(2)}, tmp_path)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "model.safetensors")

    def other(*args, **kwargs):
        raise safetensors.SafetensorError("invalid tensor")

    monkeypatch.setattr(safetensors.torch, "save_file", other)
    with pytest.raises(safetensors.SafetensorError, match="invalid tensor"):
        save_weights({"w": torch.zeros(2)}, tmp_path)


def test_the_command_line_says_a_full_disk_in_one_line(ckpts, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vllm_fmt, "save_weights", _no_room(errno.ENOSPC))
    out = tmp_path / "o"
    assert main([str(ckpts["medusa"]), "--format", "vllm", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"draftsmith: error: --output-dir {out}: writing the export failed (the disk is full)")
    assert err.count("\n") == 1 and not out.exists()


# --- a new format: its module, its line in the registry, the layouts the kinds' entries name ----------

TOY_FORMAT = '''
"""A serving engine draftsmith does not ship yet: one module."""
import json
import shutil
from dataclasses import dataclass

from draftsmith.shipping.export.common import Layout, check_folder
from draftsmith.shipping.export.format import Format, Option


@dataclass(frozen=True)
class ToyLayout(Layout):
    precision: str = "fp32"


def write(ckpt, out, *, num_speculative_tokens, verifier, toy_precision):
    shutil.copy2(ckpt.path / "config.json", out / "config.json")
    lay = FORMAT.layout(ckpt.kind)
    (out / "toy.json").write_text(json.dumps({"precision": toy_precision, "layout": lay.precision,
                                              "k": num_speculative_tokens, "verifier": verifier}))
    return {"serve": f"toy-serve DIR --k {num_speculative_tokens}"}


def check(folder, kind):
    return check_folder(folder, ("vocab_size",), None) + ([] if (folder / "toy.json").is_file() else ["no toy.json"])


DRAFT_LM = ToyLayout(precision="int4")
FORMAT = Format(
    name="toy",
    engine="ToyServe",
    help="ToyServe's draft folder",
    layout_type=ToyLayout,
    write=write,
    check=check,
    checked_against="ToyServe 1.0",
    options=(Option("--toy-precision", "toy_precision", ("fp32", "int4"), "fp32", "--format toy only: weights"),),
)
'''


def test_a_new_format_exports_and_cards(ckpts, tmp_path, monkeypatch):
    """A format is its module, its line in format.py's registry and the layout a kind's entry in
    draftsmith/kinds.py names (`Kind.exports`, the one direction from kinds to formats): the help
    lists it for that kind, `export` writes it with the kind's layout and its option, and publish
    stages it and puts it on the card."""
    import dataclasses

    from draftsmith.shipping import hub
    from draftsmith.shipping.export import _format_help
    from draftsmith.shipping.export import format as format_registry

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "toy_format.py").write_text(TOY_FORMAT)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(format_registry.BUILTIN, "toy", "toy_format:FORMAT")
    entry = REGISTRY["draft_lm"]
    monkeypatch.setitem(
        REGISTRY, "draft_lm", dataclasses.replace(entry, exports={**entry.exports, "toy": "toy_format:DRAFT_LM"})
    )
    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path / "no-engines"))
    assert "toy: ToyServe's draft folder (draft_lm)" in _format_help()
    out = export(ckpts["draft_lm"], "toy", tmp_path / "toy", num_speculative_tokens=2, toy_precision="int4")
    written = json.loads((out / "toy.json").read_text())
    assert written["precision"] == "int4" and written["layout"] == "int4" and written["k"] == 2
    meta = json.loads((out / EXPORT_META).read_text())
    assert meta["engine"] == "ToyServe" and meta["format"] == "toy" and meta["checked_against"] == "ToyServe 1.0"
    staged = [
        p.relative_to(tmp_path / "staged").as_posix()
        for p in hub.stage(ckpts["draft_lm"], "org/toy-draft", [], tmp_path / "staged")
    ]
    assert "toy/toy.json" in staged and "toy/config.json" in staged
    card = (tmp_path / "staged" / "README.md").read_text()
    assert "### ToyServe" in card and f"toy-serve drafter/toy --k {REGISTRY['draft_lm'].default_k}" in card
    assert "Export written; not decoded by an engine here" in card.split("### ToyServe")[1]
    with pytest.raises(DraftsmithError, match="does not apply"):  # a kind whose entry does not name it
        export(ckpts["eagle3"], "toy", tmp_path / "toy-eagle3")
