"""The model card's "served at load" section, from a `draftsmith serve-bench` result of that checkpoint.

A batch-1 speedup is not what a user serving many requests sees: the card shows the served
throughput with and without the drafter at each concurrency measured, τ from the engine's own
counters, and the concurrency where the drafter stopped paying (the crossover).
"""

from __future__ import annotations

import json
import pathlib

RESULT = "serve-bench/results.json"  # serve-bench's --output-dir beside the checkpoint, or in its run folder


def find_serve_bench(ckpt: pathlib.Path, sha256: str | None) -> tuple[pathlib.Path, dict] | None:
    """A serve-bench result in the checkpoint folder or its run folder that measured this
    checkpoint (the sha256 its stamp records); a result from servers the user started records no
    checkpoint and is not claimed for one."""
    for folder in (ckpt, ckpt.parent):
        p = folder / RESULT
        try:
            r = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        measured = ((r.get("stamp") or {}).get("checkpoint") or {}).get("sha256")
        if isinstance(r.get("rows"), list) and measured and measured == sha256:
            return p, r
    return None


def _acceptance(spec: dict):
    """τ from a serve-bench level: `mean_acceptance_length` (vLLM's name), or `tau` in results
    written before it; none where the counters were not valid (the server restarted mid-level)."""
    if spec.get("valid") is False:
        return None
    return spec.get("mean_acceptance_length", spec.get("tau"))


def card_lines(result: dict, source: str) -> list[str]:
    """Markdown: per temperature and concurrency, the pooled ("all") or single category's output
    tokens/s with and without the drafter, the speedup and τ; then the crossover."""
    rows = [r for r in result["rows"] if r["category"] == "all"] or result["rows"]
    stamp = result.get("stamp") or {}
    engine = stamp.get("engine") or {}
    machine = stamp.get("machine") or {}
    gpus = machine.get("gpus") or []
    hardware = f"{len(gpus)}x {gpus[0]}" if gpus else machine.get("cpu") or "?"
    out = [
        f"Served by {engine.get('name', '?')} {engine.get('version') or ''} on {hardware}, the same target with and "
        f"without this drafter, at each number of requests in flight (`{source}`):",
        "",
        "| temperature | category | requests in flight | tok/s with the drafter | without | speedup | τ |",
        "|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
    for r in sorted(rows, key=lambda r: (r["temperature"], r["category"], r["concurrency"])):
        d, b = r["drafted"], r["baseline"]
        out.append(
            f"| {r['temperature']:g} | {r['category']} | {r['concurrency']} | {fmt(d['output_tokens_per_s'], '.1f')} "
            f"| {fmt(b['output_tokens_per_s'], '.1f')} | {fmt(r['speedup']['output_tokens_per_s'], '.2f')}× "
            f"| {fmt(_acceptance(d.get('spec') or {}), '.2f')} |"
        )
    for t, cats in (result.get("crossover") or {}).items():
        stops = {c: v for c, v in cats.items() if c == "all" or len(cats) == 1}
        for c, v in stops.items():
            where = "it paid at every level measured" if v is None else f"it stops paying at {v} requests in flight"
            out += ["", f"At temperature {t} ({c}): {where}."]
    return out


__all__ = ["RESULT", "card_lines", "find_serve_bench"]
