"""The transformers anchors of `draftsmith bench` (draftsmith/evaluation/hf_anchors.py): where our
target runs compiled they give generate() a static cache (one StaticCache of one length for
every prompt, reset before each) and ask for its compiled forward; otherwise eager over a
DynamicCache. The JSON and the table say which. generate() is wrapped by a stand-in that
records its keyword arguments and runs it without the compile (a real torch.compile on CPU takes
longer than the tests should), on that static cache."""

import dataclasses

import pytest
from transformers import StaticCache

from draftsmith.evaluation import hf_anchors
from draftsmith.evaluation.bench import format_table, run_bench
from draftsmith.evaluation.prompts import load_prompts
from draftsmith.infer.engine import CACHE_BUCKET, Engine
from draftsmith.infer.sampling import GREEDY

MAX_NEW = 10
K = 2


@pytest.fixture
def draft(tiny_target):
    from draftsmith.models import load_drafter

    return load_drafter("truncated:1", tiny_target)  # built eager, before any test marks the target compiled


@pytest.fixture
def recorded_generate(tiny_target, monkeypatch):
    """Every generate() call's keyword arguments; the call itself runs eagerly."""
    model, calls = tiny_target.model, []
    real = model.generate

    def generate(inputs, **kwargs):
        calls.append(dict(kwargs))
        if kwargs.pop("compile_config", None) is not None:
            kwargs["disable_compile"] = True
        return real(inputs, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    return calls


def bench(target, draft, **kw):
    prompts = load_prompts("chat", target.tokenizer, 2)
    return prompts, run_bench(target, draft, prompts, K, MAX_NEW, GREEDY, progress=False, **kw)


def test_a_compiled_target_s_anchors_run_a_static_cache_compiled(tiny_target, draft, recorded_generate, monkeypatch):
    monkeypatch.setattr(tiny_target, "compiled", True)  # our runtime's flag; its forward stays eager here
    prompts, r = bench(tiny_target, draft)
    longest = max(len(p.ids) for p in prompts) + MAX_NEW + 1
    length = -(-longest // CACHE_BUCKET) * CACHE_BUCKET
    # warm-up (both anchors, then hf_assisted drafting 0..K a round), then each prompt's two runs
    assert len(recorded_generate) == 2 + (K + 1) + 2 * len(prompts)
    for kw in recorded_generate:
        assert isinstance(kw["cache"], StaticCache) and "cache_implementation" not in kw
        assert kw["cache"].get_max_length() == length  # one graph for all prompts
        config = kw["compile_config"]
        assert config.mode == "reduce-overhead" and config._compile_all_devices  # CPU: transformers' switch
    assert len({id(kw["cache"]) for kw in recorded_generate}) == 1  # its tensors, where CUDA graphs read them
    assert len({id(kw["compile_config"]) for kw in recorded_generate}) == 1  # an unequal config recompiles
    assert sum("assistant_model" in kw for kw in recorded_generate) == 1 + (K + 1) + len(prompts)
    assert draft.as_assistant_model().generation_config.num_assistant_tokens == K  # the warm-up's K restored
    assert r["baselines"] == {
        "hf_plain": {"cache": "static", "compiled": True, "max_cache_len": length},
        "hf_assisted": {
            "cache": "static",
            "compiled": True,
            "max_cache_len": length,
            "draft_cache": "dynamic",
            "draft_compiled": False,
        },
    }
    # fp32, T=0: transformers on its static cache decodes exactly as our plain decoding
    assert r["methods"]["hf_plain"]["outputs_match_plain"] is True
    assert r["methods"]["hf_assisted"]["outputs_match_plain"] is True
    assert (
        "transformers anchors: hf_plain static cache, compiled; "
        "hf_assisted static cache, compiled (draft: dynamic cache, eager)" in format_table(r).splitlines()
    )


def test_an_eager_target_s_anchors_run_eager_on_a_dynamic_cache(tiny_target, draft, recorded_generate):
    assert not tiny_target.compiled
    _, r = bench(tiny_target, draft, baselines=("hf_plain",))
    assert recorded_generate and all(
        not {"cache", "cache_implementation", "compile_config", "disable_compile"} & set(kw) for kw in recorded_generate
    )
    assert r["baselines"] == {"hf_plain": {"cache": "dynamic", "compiled": False}}
    assert r["methods"]["hf_plain"]["outputs_match_plain"] is True
    assert "transformers anchors: hf_plain dynamic cache, eager" in format_table(r).splitlines()


def test_hf_fast_overrides_what_the_target_s_compile_implies(tiny_target, draft, recorded_generate):
    _, r = bench(tiny_target, draft, baselines=("hf_plain",), hf_fast=True)
    assert r["baselines"]["hf_plain"]["cache"] == "static" and r["baselines"]["hf_plain"]["compiled"] is True
    assert all(isinstance(kw["cache"], StaticCache) for kw in recorded_generate)
    assert not r["compiled"] and "graphs after warm-up: " in format_table(r)  # a compiled anchor's graphs count


def test_a_real_static_cache_generate_decodes_as_our_plain_decoding(tiny_target):
    prompts = load_prompts("chat", tiny_target.tokenizer, 2)
    plain = hf_anchors.anchors(tiny_target, prompts, 16, fast=True)["hf_plain"]
    eager_static = dataclasses.replace(plain, compiled=False)  # the cache as compiled runs it, without the compile
    kwargs = eager_static.generate_kwargs(tiny_target.model)
    assert kwargs == {"cache": kwargs["cache"], "disable_compile": True}
    assert kwargs["cache"] is plain.generate_kwargs(tiny_target.model)["cache"]  # one per target and length
    eos, pad = tiny_target.eos_token_ids, min(tiny_target.eos_token_ids)
    engine = Engine(tiny_target)
    for i, p in enumerate([*prompts, prompts[0]]):  # the reused cache starts empty each time
        ours = engine.generate(p.ids, 16, GREEDY, seed=i, speculative=False).tokens
        theirs, _ = hf_anchors.hf_generate(tiny_target.model, p.ids, 16, GREEDY, eos, pad, i, anchor=eager_static)
        assert theirs == ours


def test_the_table_line_names_each_anchor_s_cache_and_compile():
    line = hf_anchors.anchors_line(
        {
            "hf_plain": {"cache": "static", "compiled": True},
            "hf_assisted": {"cache": "dynamic", "compiled": False, "draft_cache": "dynamic", "draft_compiled": False},
        }
    )
    assert line == (
        "transformers anchors: hf_plain static cache, compiled; hf_assisted dynamic cache, eager "
        "(draft: dynamic cache, eager)"
    )
