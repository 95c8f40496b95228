"""Issue 17 (GPU): every drafter's drafting forwards compile to a few fixed graphs.

On CUDA `compile_decode` is torch.compile with CUDA graphs; a graph is replayed only for the
shapes (and buffer addresses) it was captured with, so a drafter whose shapes grew with the
context would recompile every step. Here (CPU) the same torch.compile runs with a counting
aot_eager backend: dynamo's tracing, guards and functionalisation are all real, only the code
generation is skipped. Each drafter is driven through the Engine with acceptance forced to
every count 0..k (its catch-up then sees 1..k+1 rows), twice, on prompts of different lengths:

- outputs equal plain decoding, and the compiled drafter drafts what the eager one drafts;
- the forwards compile without graph breaks (fullgraph) into at most one graph per query shape;
- a second, longer prompt compiles nothing new: no shape depends on the context length.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from draftsmith.infer.engine import Engine
from draftsmith.infer.proposal import Proposal
from draftsmith.infer.tree import TreeConfig
from draftsmith.models import base as base_mod
from draftsmith.models.dflash import DFlash, DFlashConfig, DFlashModel, default_target_layers
from draftsmith.models.draft_lm import DraftLM, truncate_model
from draftsmith.models.eagle import Eagle, EagleConfig, EagleModel
from draftsmith.models.eagle3 import Eagle3, Eagle3Config, Eagle3Model, default_aux_layers
from draftsmith.models.medusa import Medusa, MedusaHeads
from draftsmith.models.pard import Pard

K = 3
PROMPTS = ([5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 31, 32, 33, 34, 35])


def _eagle(target):
    model = EagleModel(
        EagleConfig(
            vocab_size=target.vocab_size, target="tiny", hidden_layers=[-1], **EagleConfig.layer_fields(target.config)
        )
    )
    return Eagle(model.to(device=target.device, dtype=torch.float32), target, "eagle")


def _eagle3(target):
    cfg = Eagle3Config(
        vocab_size=target.vocab_size,
        draft_vocab_size=100,
        target="tiny",
        hidden_layers=default_aux_layers(target.config.num_hidden_layers),
        **EagleConfig.layer_fields(target.config),
    )
    model = Eagle3Model(cfg)
    model.set_vocab(torch.randperm(target.vocab_size)[:100].sort().values, target.model.get_output_embeddings())
    return Eagle3(model.to(device=target.device, dtype=torch.float32), target, "eagle3")


def _medusa(target):
    return Medusa(MedusaHeads.from_target(target.model, num_heads=K, num_layers=1).to(target.device), target, "medusa")


def _dflash(target):
    layers = target.config.num_hidden_layers
    cfg = DFlashConfig(
        vocab_size=target.vocab_size,
        target="tiny",
        hidden_layers=default_target_layers(layers, 1),
        num_hidden_layers=1,
        block_size=K + 1,
        mask_token_id=0,
        **EagleConfig.layer_fields(target.config),
    )
    return DFlash(DFlashModel(cfg).to(device=target.device, dtype=torch.float32), target, "dflash")


def _draft_lm(target):
    return DraftLM.truncated(target, 1)


def _pard(target):
    return Pard(truncate_model(target.model, 1, target.name), target, "pard", mask_token_id=0)


# name -> (build, tree config or None, most graphs); every drafter compiles through models/base.py
# Most graphs: a chain compiles one graph per query count (EAGLE/DFlash: catch-up over 1..k+1
# rows, the chain's own steps reuse the 1-row graph; draft LM: 1 or 2 tokens; PARD: k..2k;
# Medusa: one, its input is always one row); an EAGLE-2 tree adds one per level's frontier.
KINDS = {
    "eagle": (_eagle, None, K + 1),
    "eagle3": (_eagle3, None, K + 1),
    "eagle3-tree": (_eagle3, TreeConfig(topk=2, depth=3, num_draft_tokens=7), K + 1 + 1),
    "medusa": (_medusa, None, 1),
    "dflash": (_dflash, None, K + 1),
    "draft_lm": (_draft_lm, None, 2),
    "pard": (_pard, None, K + 1),
}


class Forced:
    """A drafter whose first n tokens are the target's own continuation, n cycling 0..k: the
    engine then keeps 0..k drafts, so the real drafter underneath (whose propose() runs in full
    every step) catches up on every row count it can meet. Chains only."""

    def __init__(self, inner, reference: list[int], prompt_len: int):
        self.inner, self.reference, self.prompt_len = inner, reference, prompt_len
        self.counts = itertools.cycle(range(K + 1))

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, seq, k, sampling, generator=None, tree=None):
        p = self.inner.propose(seq, k, sampling, generator, tree)
        n, at = next(self.counts), seq.shape[1] - self.prompt_len
        tokens = p.tokens.clone()
        tokens[:n] = torch.tensor(self.reference[at : at + n], device=tokens.device)
        return Proposal(tokens, p.probs, tree=p.tree)


@pytest.fixture
def counting_compile(monkeypatch):
    """compile_decode as torch.compile(fullgraph, dynamic=False) with aot_eager, recording the
    input shapes of every graph it compiles."""
    from torch._dynamo.backends.registry import lookup_backend

    graphs: list[tuple] = []

    def backend(gm, example_inputs):
        graphs.append(tuple(tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)))
        return lookup_backend("aot_eager")(gm, example_inputs)

    def compile_decode(forward):
        return torch.compile(forward, backend=backend, dynamic=False, fullgraph=True)

    torch._dynamo.reset()
    monkeypatch.setattr(base_mod, "compile_decode", compile_decode)
    yield graphs
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(KINDS))
def test_drafting_compiles_to_fixed_graphs_and_drafts_what_eager_drafts(
    name, tiny_target, monkeypatch, counting_compile
):
    build, tree, most = KINDS[name]
    graphs = counting_compile
    torch.manual_seed(0)
    eager = build(tiny_target)
    torch.manual_seed(0)
    monkeypatch.setattr(tiny_target, "compiled", True, raising=False)
    compiled = build(tiny_target)
    # The flag stays on, so the engine sizes every request's caches as for a compiled target
    # (in CACHE_BUCKET steps); the target's own forward was bound eager when it was loaded.
    assert graphs == []  # nothing compiles before the first draft

    seen_after_first = None
    for i, prompt in enumerate(PROMPTS):
        plain = Engine(tiny_target, None, K).generate(prompt, 24, speculative=False, eos_token_ids=())
        runs = {}
        for label, drafter in (("eager", eager), ("compiled", compiled)):
            d = drafter if tree is not None else Forced(drafter, plain.tokens, len(prompt))
            engine = Engine(tiny_target, d, K, tree=tree)
            runs[label] = engine.generate(prompt, 24, eos_token_ids=())
            assert runs[label].tokens == plain.tokens, f"{name} {label}: output differs from plain decoding"
        e, c = runs["eager"].metrics, runs["compiled"].metrics
        assert (c.drafts, c.drafted_tokens, c.accepted_tokens) == (e.drafts, e.drafted_tokens, e.accepted_tokens), (
            f"{name}: the compiled drafter drafted differently from the eager one"
        )
        if tree is None:  # every catch-up count was met
            assert e.accepted_tokens >= sum(range(K + 1)) and e.drafts >= K + 1
        if i == 0:
            seen_after_first = list(graphs)
    assert 1 <= len(seen_after_first) <= most, f"{name}: {len(seen_after_first)} graphs {seen_after_first}"
    assert graphs == seen_after_first, f"{name}: a longer prompt compiled new graphs {graphs[len(seen_after_first) :]}"


def test_bench_compiled_drafting_reports_eager_and_compiled_side_by_side(tiny_cache, tmp_path, counting_compile):
    import json
    import runpy

    bench = runpy.run_path("scripts/bench_compiled_drafting.py")
    out = tmp_path / "compiled.json"
    assert (
        bench["main"](
            [
                "--target",
                "tiny-random",
                "--draft",
                "truncated:1",
                "--dtype",
                "float32",
                "--prompts",
                "chat",
                "--num-prompts",
                "3",
                "--max-new-tokens",
                "12",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["methods"]
    assert set(rows) == {"draft_lm eager", "draft_lm compiled"}
    c = rows["draft_lm compiled"]
    assert c["compiled"] and not rows["draft_lm eager"]["compiled"] and c["draft_over_eager"] > 0
    assert c["same_acceptance_as_eager"] and c["outputs_match_plain"] and rows["draft_lm eager"]["outputs_match_plain"]
    assert (
        1 <= len(counting_compile) <= 2
    )  # the compiled copy's decode shapes (1-2 tokens); the eager copy compiles none
