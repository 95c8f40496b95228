"""The contract every drafter kind keeps, run over every entry of the registry (draftsmith/kinds.py)
through the tiny instance the entry declares (`Kind.tiny_ref`, draftsmith/testing.py; built once
per session by tests/conftest.py's `tiny`):

- greedy output equals plain decoding token for token;
- sampled output follows the target's law (chi-square against the exact law, tests/lawtest.py):
  lossless verification (Leviathan et al. 2023; Chen et al. 2023) whatever the draft proposes;
- the checkpoint it writes reloads through `--draft` into a drafter that proposes the same tokens
  with the same probabilities;
- the cap on K: the loaded drafter reports the cap its registry entry names (`k_limit`), runs at
  the cap and refuses one above it in one line;
- compiled drafting (torch.compile with a counting backend) meets a few fixed shapes, none of
  which depends on the context length, and drafts what eager drafting drafts.

The per-kind test files keep only what is particular to a kind.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from lawtest import chisquare_pvalue, engine_samples, exact_law

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.infer.proposal import WrappedDrafter, speculative_cap
from draftsmith.kinds import KINDS
from draftsmith.testing import Forced

K = 3  # the chain length the contracts run at (at most a kind's cap)
# A repeat at the end of each prompt gives a lookup drafter something to find.
PROMPTS = [[5, 40, 41, 42, 43, 9, 12, 5, 40], [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 31, 7, 8, 9]]
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)  # top-k 3 keeps the law's support enumerable


@pytest.fixture(scope="module")
def law(tiny_target):
    """(prompt, the target's exact law of its 3-token continuations). The prompt repeats itself,
    so a drafter that looks its context up drafts at the first step at least."""
    prompt = [40, 41, 42, 43, 40, 41, 42, 43]
    return prompt, exact_law(tiny_target, prompt, 3, SAMPLING)


def k_for(drafter) -> int:
    return min(K, speculative_cap(drafter) or K)


@pytest.mark.parametrize("name", list(KINDS))
def test_greedy_output_equals_plain_decoding(name, tiny_target, tiny):
    _, _, drafter = tiny(name)
    drafts = 0
    for k in sorted({1, k_for(drafter)}):
        engine = Engine(tiny_target, drafter, k)
        for i, prompt in enumerate(PROMPTS):
            plain = engine.generate(prompt, 24, speculative=False, eos_token_ids=())
            spec = engine.generate(prompt, 24, eos_token_ids=())
            assert spec.tokens == plain.tokens, f"{name}: k={k}, prompt {i}: differs from plain decoding"
            assert spec.stop_reason == plain.stop_reason == "max_new_tokens"
            drafts += spec.metrics.drafted_tokens
    assert drafts > 0, f"{name}: drafted nothing, so nothing was verified"


@pytest.mark.parametrize("name", list(KINDS))
def test_sampled_output_follows_the_target_law(name, tiny_target, tiny, law):
    """Chi-square of 3-token continuations against the target's exact law. A rule that accepted
    drafts too often would shift mass to the draft's law."""
    _, _, drafter = tiny(name)
    prompt, law = law
    engine = Engine(tiny_target, drafter, min(2, k_for(drafter)))
    counts, _, drafted = engine_samples(engine, prompt, law, SAMPLING, 400)  # KeyError: outside the support
    assert drafted > 0
    assert chisquare_pvalue(counts, law) > 1e-3, f"{name}: sampled output departs from the target's law"


class Recording(WrappedDrafter):
    """A drafter's proposals, as the engine asked for them."""

    def __init__(self, inner):
        super().__init__(inner)
        self.seen = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, seq, k, sampling, generator=None, tree=None):
        p = self.inner.propose(seq, k, sampling, generator, tree)
        self.seen.append((p.tokens.tolist(), None if p.probs is None else p.probs.detach().clone()))
        return p


@pytest.mark.parametrize("name", list(KINDS))
def test_its_checkpoint_reloads_into_the_same_proposals(name, tiny_target, tiny):
    built, spec, loaded = tiny(name)
    assert loaded.kind == name
    if pathlib.Path(spec).is_dir():
        from draftsmith.models import read_drafter_meta

        assert read_drafter_meta(spec)["kind"] == name
    runs = []
    for drafter in (built, loaded):
        rec = Recording(drafter)
        engine = Engine(tiny_target, rec, k_for(loaded))
        out = [
            engine.generate(p, 16, SamplingConfig(temperature=1.0), seed=3, eos_token_ids=()).tokens for p in PROMPTS
        ]
        runs.append((out, rec.seen))
    (out_a, seen_a), (out_b, seen_b) = runs
    assert out_a == out_b
    assert [t for t, _ in seen_a] == [t for t, _ in seen_b], f"{name}: the reloaded drafter proposes other tokens"
    for (_, pa), (_, pb) in zip(seen_a, seen_b):
        assert (pa is None) == (pb is None)
        if pa is not None:
            torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(KINDS))
def test_k_runs_at_the_cap_and_one_above_is_refused_in_one_line(name, tiny_target, tiny):
    kind = KINDS[name]
    _, spec, drafter = tiny(name)
    cap = speculative_cap(drafter)
    assert (cap is None) == (kind.k_limit is None), f"{name}: k_limit {kind.k_limit!r} but the drafter's cap is {cap}"
    if kind.k_limit is not None:  # the key the entry names is the cap the loaded drafter reports
        assert getattr(drafter.model.config, kind.k_limit) == cap, f"{name}: {kind.k_limit} is not the cap {cap}"
    at = cap or 8  # no cap: any K runs
    plain = Engine(tiny_target).generate(PROMPTS[1], 12, eos_token_ids=()).tokens
    assert Engine(tiny_target, drafter, at).generate(PROMPTS[1], 12, eos_token_ids=()).tokens == plain
    if cap is not None:
        with pytest.raises(DraftsmithError, match=rf"{cap + 1}: .* drafts at most {cap} tokens per step") as err:
            Engine(tiny_target, drafter, cap + 1)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", list(KINDS))
def test_compiled_drafting_meets_fixed_shapes_and_drafts_what_eager_drafts(
    name, tiny_target, tiny, monkeypatch, counting_compile
):
    """On CUDA a graph replays only the shapes it was captured with, so a drafter whose shapes
    grew with the context would recompile every step. Acceptance is forced to every count 0..k,
    so the drafter meets every catch-up count; a second, longer prompt must compile nothing new."""
    from draftsmith.models import load_drafter
    from draftsmith.models.base import TrainedDrafter

    _, spec, eager = tiny(name)
    k = k_for(eager)
    monkeypatch.setattr(tiny_target, "compiled", True, raising=False)
    compiled = load_drafter(spec, tiny_target)
    graphs = counting_compile
    assert graphs == []  # nothing compiles before the first draft
    first = None
    for i, prompt in enumerate(PROMPTS):
        plain = Engine(tiny_target, None, k).generate(prompt, 24, speculative=False, eos_token_ids=())
        runs = {}
        for label, drafter in (("eager", eager), ("compiled", compiled)):
            engine = Engine(tiny_target, Forced(drafter, plain.tokens, len(prompt), k), k)
            runs[label] = engine.generate(prompt, 24, eos_token_ids=())
            assert runs[label].tokens == plain.tokens, f"{name} {label}: output differs from plain decoding"
        e, c = runs["eager"].metrics, runs["compiled"].metrics
        assert (c.drafts, c.drafted_tokens, c.accepted_tokens) == (e.drafts, e.drafted_tokens, e.accepted_tokens)
        if i == 0:
            first = list(graphs)
    # a chain meets at most k+1 query shapes; a drafter with a model compiles at least one
    assert len(first) <= k + 1, f"{name}: {len(first)} graphs {first}"
    assert len(first) >= isinstance(eager, TrainedDrafter), f"{name}: nothing compiled"
    assert graphs == first, f"{name}: a longer prompt compiled new graphs {graphs[len(first) :]}"


@pytest.mark.parametrize("name", list(KINDS))
def test_it_answers_the_drafter_contract(name, tiny_target, tiny):
    """Every member the engine, the adaptive policy and the bench read (infer/proposal.py's
    `Drafter`), present with a value of its declared type: callers read them without probing."""
    from draftsmith.infer.proposal import Drafter
    from draftsmith.infer.tree import TreeConfig

    _, _, drafter = tiny(name)
    assert isinstance(drafter, Drafter)
    assert drafter.kind == name and isinstance(drafter.name, str) and drafter.name
    assert isinstance(drafter.needs_hidden_states, bool) and isinstance(drafter.supports_trees, bool)
    assert bool(drafter.hidden_layers) == drafter.needs_hidden_states  # the layers it reads, if any
    cap = drafter.max_speculative_tokens
    assert cap is None or (isinstance(cap, int) and cap >= 1)
    default = drafter.default_num_speculative_tokens
    assert isinstance(default, int) and 1 <= default <= (cap or default)
    assert drafter.draft_ids is None or drafter.draft_ids.dim() == 1
    if drafter.supports_trees:
        assert drafter.max_tree_nodes(TreeConfig(topk=2, depth=2)) >= 2
    assistant = drafter.as_assistant_model()
    assert assistant is None or isinstance(assistant, torch.nn.Module)
    own = drafter.own_model()  # what --draft-dtype casts and --cpu-matmul times its kernels on
    assert own is None or isinstance(own, torch.nn.Module)
    routed = drafter.linear_modules()  # what --cpu-matmul routes: None for a drafter with no model
    assert (own is None) == (routed is None), f"{name}: a model to route but none of its own, or the reverse"
    assert routed is None or any(isinstance(m, torch.nn.Linear) for m in routed.modules())
    assert drafter.forward_why is None or isinstance(drafter.forward_why, str)


@pytest.mark.parametrize("name", list(KINDS))
def test_plain_steps_run_no_draft_forward_and_the_next_draft_catches_up_in_one(name, tiny_target, tiny, monkeypatch):
    """A plain step inside the speculative engine (the adaptive policy's K = 0) does a plain
    step's work: the drafter's modules are not called at all. What it skipped (an EAGLE head's
    rows, a draft LM's tokens) it takes in at its next propose, batched: a drafted step after
    plain steps calls its modules as often as a drafted step after a drafted one, and the output
    stays plain decoding's."""
    import draftsmith.infer.engine as engine_module
    from draftsmith.infer.adaptive import AdaptiveK

    _, _, drafter = tiny(name)
    k = k_for(drafter)
    script = (k, k, 0, 0, 0, k, k, 0, k)
    calls, at_choose = [0], []
    target_modules = {id(m) for m in tiny_target.model.modules()}  # a borrowed embedding or LM head
    mine = {  # the modules the drafter holds (prompt lookup: none)
        id(m) for v in vars(drafter).values() if isinstance(v, torch.nn.Module) for m in v.modules()
    } - target_modules

    def count(module, args):
        calls[0] += id(module) in mine

    class Scripted(AdaptiveK):
        def choose(self) -> int:
            at_choose.append(calls[0])
            self.history.append(script[len(self.history) % len(script)])
            return self.history[-1]

    monkeypatch.setattr(engine_module, "AdaptiveK", Scripted)
    engine = Engine(tiny_target, drafter, k, adaptive=True)
    plain = engine.generate(PROMPTS[1], 40, speculative=False, eos_token_ids=())
    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        spec = engine.generate(PROMPTS[1], 40, eos_token_ids=())
    finally:
        handle.remove()
    assert spec.tokens == plain.tokens
    per_step = [b - a for a, b in zip(at_choose, at_choose[1:])]  # the drafter's module calls, step by step
    assert len(per_step) >= len(script), f"{name}: too few steps {per_step}"
    chosen = spec.extra["adaptive_k"]["k_per_step"]
    for i, (k_step, n) in enumerate(zip(chosen, per_step)):
        if k_step == 0:
            assert n == 0, f"{name}: plain step {i} called the drafter's modules {n} times: {per_step} {chosen}"
    after_draft, after_plain = per_step[1], [per_step[5], per_step[8]]
    assert after_plain == [after_draft] * 2, f"{name}: catch-up is not batched: {per_step[:9]}"
    assert (after_draft > 0) == KINDS[name].trainable, f"{name}: {after_draft} module calls per drafted step"
