"""The graph counters every bench report carries: compiles, graph breaks and CUDA-graph skips
and re-records while the runs were timed (zeros in an eager run; anything else means the timed
path was not the compiled one the report names)."""

import torch

from draftsmith.evaluation.bench import format_table, graphs_line, run_bench, run_compare
from draftsmith.evaluation.graph_health import FIELDS, counting, graph_counters
from draftsmith.evaluation.prompts import Prompt
from draftsmith.infer.sampling import SamplingConfig
from draftsmith.models import load_drafter

PROMPTS = [Prompt([5, 6, 7, 8, 9], "a", "chat"), Prompt([7, 8, 9, 10, 11, 12], "b", "code")]


def test_counting_sees_compiles_and_breaks():
    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y + 1

    compiled = torch.compile(f, backend="eager")
    with counting() as seen:
        compiled(torch.ones(3))
        compiled(torch.ones(3))  # the same shape: nothing new
    assert seen["graph_breaks"] >= 1 and seen["graphs"] >= 2
    with counting() as again:
        compiled(torch.ones(3))
    assert again == dict.fromkeys(FIELDS, 0)
    assert set(graph_counters()) == set(FIELDS)


def test_bench_and_compare_reports_carry_the_counters(tiny_target):
    drafter = load_drafter("truncated:2", tiny_target)
    result = run_bench(tiny_target, drafter, PROMPTS, 3, 8, SamplingConfig(), baselines=(), progress=False)
    assert result["graphs_after_warmup"] == dict.fromkeys(FIELDS, 0)  # eager on a CPU
    assert "graphs after warm-up" not in format_table(result)  # an eager, healthy run says nothing
    assert "graphs after warm-up" in format_table({**result, "compiled": True})
    from draftsmith.evaluation.bench import Method

    compare = run_compare(tiny_target, [Method("lm", drafter, 3)], PROMPTS, 8, SamplingConfig(), progress=False)
    assert compare["graphs_after_warmup"] == dict.fromkeys(FIELDS, 0)


def test_graphs_line_flags_anything_but_zeros():
    assert "not all 0" not in graphs_line(dict.fromkeys(FIELDS, 0))
    assert "not all 0" in graphs_line({**dict.fromkeys(FIELDS, 0), "cudagraph_skips": 2})
