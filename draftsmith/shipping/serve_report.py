"""serve-bench's rows: the drafted and plain servers' figures side by side with their speedups, the
crossover concurrency, the table and the PNG (draftsmith/shipping/serve_bench.py runs the sweep)."""

from __future__ import annotations

import pathlib

from draftsmith.shipping import serve_load

# Latencies: speedup = plain / drafted (above 1: the drafter is faster); rates: drafted / plain.
RATES = ("output_tokens_per_s", "requests_per_s")
LATENCIES = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
             *serve_load.OLD_KEYS)  # fmt: skip
ALL = "all"


def _add(a: serve_load.SpecCounters, b: serve_load.SpecCounters) -> serve_load.SpecCounters:
    pos = dict(a.per_pos or {})
    for p, v in (b.per_pos or {}).items():
        pos[p] = pos.get(p, 0.0) + v
    return serve_load.SpecCounters(a.drafts + b.drafts, a.draft_tokens + b.draft_tokens, a.accepted + b.accepted, pos)


def _ratio(a, b):
    return a / b if a is not None and b else None


def combine(drafted: dict, baseline: dict) -> list[dict]:
    """One row per (temperature, category, concurrency) both servers finished: both servers'
    figures and the speedups. A level where requests failed on either server is not a valid
    comparison (its figures count only the requests that finished): `valid` false, no speedups."""
    rows = []
    for key, d in drafted.items():
        t, cat, c = key
        b = baseline.get(key)
        if b is None:
            continue
        failed = {"drafted": d.get("failed", 0), "baseline": b.get("failed", 0)}
        valid = not any(failed.values())
        speedup = {f: _ratio(d.get(f), b.get(f)) if valid else None for f in RATES}
        speedup.update({f: _ratio(b.get(f), d.get(f)) if valid else None for f in LATENCIES})
        row = {"temperature": t, "category": cat, "concurrency": c, "drafted": d, "baseline": b, "speedup": speedup,
               "valid": valid}  # fmt: skip
        if not valid:
            row["note"] = f"failed requests: {failed['drafted']} drafted, {failed['baseline']} plain; no speedup"
        rows.append(row)
    return rows


def crossovers(rows: list[dict]) -> dict:
    """temperature -> category -> the first concurrency where the drafted server's output tokens/s
    is at or below the plain server's (None: the drafter pays at every level measured)."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: r["concurrency"]):
        cats = out.setdefault(f"{r['temperature']:g}", {})
        if r.get("valid") is False:  # failed requests: this level compares nothing
            cats.setdefault(r["category"], None)
            continue
        d, b = r["drafted"]["output_tokens_per_s"], r["baseline"]["output_tokens_per_s"]
        if r["category"] not in cats:
            cats[r["category"]] = None
        if cats[r["category"]] is None and d is not None and b is not None and d <= b:
            cats[r["category"]] = r["concurrency"]
    return out


def _fmt(x, spec="{:.2f}", scale=1.0) -> str:
    return "-" if x is None else spec.format(x * scale)


def _spec_value(spec: dict) -> str:
    if spec.get("valid") is False:
        return "invalid"
    return _fmt(spec.get("mean_acceptance_length", spec.get("tau")))


def format_table(result: dict) -> str:
    """The table; a level with failed requests shows them (drafted/plain) and no speedup."""
    head = ("T", "category", "conc", "peak", "failed", "tok/s", "plain", "speedup", "req/s x", "TTFT p50 ms",
            "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p50 ms", "TPOT x", "tau", "accept/pos")  # fmt: skip
    lines = [head]
    for r in result["rows"]:
        d, b, s, spec = r["drafted"], r["baseline"], r["speedup"], r["drafted"].get("spec") or {}
        failed = f"{d.get('failed', 0)}/{b.get('failed', 0)}" if d.get("failed") or b.get("failed") else "-"
        lines.append((
            f"{r['temperature']:g}", r["category"], str(r["concurrency"]), str(d.get("max_concurrency_seen") or "-"),
            failed, _fmt(d["output_tokens_per_s"], "{:.1f}"),
            _fmt(b["output_tokens_per_s"], "{:.1f}"), _fmt(s["output_tokens_per_s"], "{:.2f}x"),
            _fmt(s["requests_per_s"], "{:.2f}x"), _fmt(d.get("median_ttft_ms"), "{:.0f}"),
            _fmt(d.get("p99_ttft_ms"), "{:.0f}"), _fmt(d.get("median_tpot_ms"), "{:.1f}"),
            _fmt(d.get("p99_tpot_ms"), "{:.1f}"), _fmt(d.get("median_itl_ms"), "{:.1f}"),
            _fmt(s.get("median_tpot_ms"), "{:.2f}x"), _spec_value(spec),
            " ".join(f"{a:.2f}" for a in spec.get("per_position") or []) or "-",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    text = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in lines]
    for t, cats in result["crossover"].items():
        where = ", ".join(f"{c}: {'none' if v is None else v}" for c, v in cats.items())
        text.append(f"crossover at T={t} (first concurrency where the drafter's tok/s <= plain): {where}")
    bad = [r for r in result["rows"] if r.get("valid") is False]
    if bad:
        text.append(f"{len(bad)} level(s) had failed requests (column failed: drafted/plain): no speedup reported "
                    "for them, and the crossover skips them")  # fmt: skip
    return "\n".join(text)


def plot(result: dict, path: pathlib.Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib)")
        return False
    series: dict = {}
    for r in result["rows"]:
        if r["speedup"]["output_tokens_per_s"] is not None:  # none where requests failed
            series.setdefault((r["temperature"], r["category"]), []).append(
                (r["concurrency"], r["speedup"]["output_tokens_per_s"])
            )
    if not series:
        print("no level without failed requests: no PNG")
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (t, cat), pts in series.items():
        pts = sorted(pts)
        width = 2.5 if cat == ALL else 1.0
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linewidth=width, label=f"{cat} (T={t:g})")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requests in flight")
    ax.set_ylabel("output tokens/s, drafted / plain")
    ax.set_title(f"serve-bench: {result['stamp']['engine']['name']} {result['stamp']['engine']['version'] or ''}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
