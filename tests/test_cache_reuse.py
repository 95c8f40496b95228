"""One cache per model and length, reset between requests: the target, the draft LM and PARD
decode every request with the same cache object and tensors (CUDA graphs captured over them
replay), and their outputs are those of a fresh cache."""

import pytest
import torch

from draftsmith.infer import Engine
from draftsmith.infer.cache import CachePool, KVCache
from draftsmith.models import Target, load_drafter
from draftsmith.models.draft_lm import truncate_model
from draftsmith.models.pard import Pard

PROMPT, OTHER = [5, 6, 7, 8, 9], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]


def tensors(kv: KVCache) -> list[int]:
    return [getattr(layer, name).data_ptr() for layer in kv.hf.layers for name in ("keys", "values")]


@pytest.fixture
def target(tiny_cache):
    return Target.load("tiny-random", dtype="float32", device="cpu", compile=False)


def drafters(target):
    yield "draft_lm", load_drafter("truncated:2", target)
    yield (
        "pard",
        Pard(truncate_model(target.model, 2), target, "x", mask_token_id=258),
    )  # byte 0xFF: never in UTF-8 text


def test_target_reuses_its_cache_and_decodes_as_with_a_fresh_one(target):
    fresh = Engine(Target.load("tiny-random", dtype="float32", device="cpu", compile=False))
    ref = fresh.generate(PROMPT, 24, eos_token_ids=()).tokens
    caches = []
    new_cache = target.new_cache
    target.new_cache = lambda n: caches.append(new_cache(n)) or caches[-1]
    engine = Engine(target)
    outs = [engine.generate(PROMPT, 24, eos_token_ids=()).tokens for _ in range(2)]
    assert outs == [ref, ref]
    assert caches[0] is caches[1] and caches[1].length > 0
    # another length between two equal requests: a cache of its own; outputs unchanged
    engine.generate(OTHER, 40, eos_token_ids=())
    assert engine.generate(PROMPT, 24, eos_token_ids=()).tokens == ref


@pytest.mark.parametrize("kind", ["draft_lm", "pard"])
def test_drafters_reuse_their_cache_and_keep_greedy_outputs(target, kind):
    drafter = dict(drafters(target))[kind]
    plain = Engine(target).generate(PROMPT, 24, eos_token_ids=()).tokens
    engine = Engine(target, drafter, 3)
    first = engine.generate(PROMPT, 24, eos_token_ids=())
    engine.generate(OTHER, 24, eos_token_ids=())  # another length in between
    second = engine.generate(PROMPT, 24, eos_token_ids=())
    cache, ptrs = drafter.cache, tensors(drafter.cache)
    third = engine.generate(PROMPT, 24, eos_token_ids=())  # the same length again: the same cache
    assert first.tokens == second.tokens == third.tokens == plain
    assert (first.metrics.accepted_tokens, first.metrics.drafts) == (
        third.metrics.accepted_tokens,
        third.metrics.drafts,
    )
    assert drafter.cache is cache and tensors(drafter.cache) == ptrs


def test_reset_cache_equals_a_new_one(target):
    kv = target.new_cache(32)
    target.forward(torch.tensor([PROMPT]), kv)
    assert kv.length == len(PROMPT)
    again = target.new_cache(32)
    assert again is kv and again.length == 0
    assert all(float(getattr(layer, n).abs().sum()) == 0 for layer in again.hf.layers for n in ("keys", "values"))


def test_pool_keeps_one_cache_per_length_up_to_its_bound():
    made = []

    def make(n):
        return lambda: made.append(n) or KVCacheStub(n)

    pool = CachePool(keep=2)
    a = pool.get(256, make(256))
    assert pool.get(256, make(256)) is a and a.resets == 1
    b = pool.get(512, make(512))
    assert pool.get(256, make(256)) is a and pool.get(512, make(512)) is b
    pool.get(768, make(768))  # a third length: the least recently used (256) goes
    assert pool.get(256, make(256)) is not a and made == [256, 512, 768, 256]


class KVCacheStub:
    def __init__(self, n):
        self.max_length, self.resets = n, 0

    def reset(self):
        self.resets += 1
