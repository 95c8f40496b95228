"""How healthy the compiled path was during a run: torch's own dynamo/inductor counters read
before and after, their difference recorded with the figures. A compiled report whose graphs
broke, recompiled per request or fell back from CUDA graphs measures something else than it
says; these counts make that visible (all zero in an eager or CPU run)."""

from __future__ import annotations

import contextlib


def graph_counters() -> dict[str, int]:
    """The process-wide counts so far: compiled frames, distinct graphs (each one a compile or a
    recompile), graph breaks, CUDA-graph skips (the reason goes to torch's log) and re-records
    for inputs whose address changed."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo: nothing was compiled
        return {name: 0 for name in FIELDS}
    return {
        "frames_compiled": int(counters["frames"]["ok"]),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]),
        "cudagraph_rerecords": int(counters["inductor"]["cudagraph_recorded_non_static_inputs"]),
    }


FIELDS = ("frames_compiled", "graphs", "graph_breaks", "cudagraph_skips", "cudagraph_rerecords")


def counters_since(before: dict[str, int]) -> dict[str, int]:
    """What happened since `before` (a graph_counters() result)."""
    now = graph_counters()
    return {name: now[name] - before.get(name, 0) for name in FIELDS}


@contextlib.contextmanager
def counting():
    """`with counting() as seen:` ... then `seen` holds the counts of what ran inside."""
    seen: dict[str, int] = {}
    before = graph_counters()
    try:
        yield seen
    finally:
        seen.update(counters_since(before))


__all__ = ["FIELDS", "counters_since", "counting", "graph_counters"]
