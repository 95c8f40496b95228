"""Compiled drafting beyond the chains every kind's contract checks (tests/test_contract.py):
an EAGLE-2 dynamic tree over an EAGLE-3 draft compiles to a few fixed graphs, and the bench
script reports eager and compiled drafting side by side.

On CUDA `compile_decode` is torch.compile with CUDA graphs; a graph is replayed only for the
shapes (and buffer addresses) it was captured with. Here (CPU) the same torch.compile runs with
a counting aot_eager backend (tests/conftest.py's `counting_compile`): dynamo's tracing, guards
and functionalisation are all real, only the code generation is skipped.
"""

from __future__ import annotations

from draftsmith.infer.engine import Engine
from draftsmith.infer.tree import TreeConfig

K = 3
PROMPTS = ([5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 31, 32, 33, 34, 35])
TREE = TreeConfig(topk=2, depth=3, num_draft_tokens=7)


def test_an_eagle3_dynamic_tree_compiles_to_fixed_graphs(tiny_target, tiny, monkeypatch, counting_compile):
    """One graph per catch-up count (1..k+1 rows) and one per level's frontier at most; a second,
    longer prompt compiles nothing new."""
    from draftsmith.models import load_drafter

    _, spec, eager = tiny("eagle3")
    monkeypatch.setattr(tiny_target, "compiled", True, raising=False)
    compiled = load_drafter(spec, tiny_target)
    graphs = counting_compile
    assert graphs == []
    first = None
    for i, prompt in enumerate(PROMPTS):
        plain = Engine(tiny_target, None, K).generate(prompt, 24, speculative=False, eos_token_ids=())
        runs = {
            label: Engine(tiny_target, drafter, K, tree=TREE).generate(prompt, 24, eos_token_ids=())
            for label, drafter in (("eager", eager), ("compiled", compiled))
        }
        for label, run in runs.items():
            assert run.tokens == plain.tokens, f"{label}: output differs from plain decoding"
        e, c = runs["eager"].metrics, runs["compiled"].metrics
        assert (c.drafts, c.drafted_tokens, c.accepted_tokens) == (e.drafts, e.drafted_tokens, e.accepted_tokens)
        if i == 0:
            first = list(graphs)
    assert 1 <= len(first) <= K + 2, f"{len(first)} graphs {first}"
    assert graphs == first, f"a longer prompt compiled new graphs {graphs[len(first) :]}"


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
