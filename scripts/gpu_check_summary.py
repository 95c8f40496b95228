"""The summary of a scripts/gpu_check.sh run folder, from whatever its steps have written so far
(run after every step: a missing or partial JSON prints as "no result" or as the rows it has).

    python scripts/gpu_check_summary.py RUN_DIR SHAPE
"""

from __future__ import annotations

import json
import pathlib
import sys


def load(run: pathlib.Path, name: str):
    try:
        return json.loads((run / name).read_text())
    except (OSError, ValueError):
        return None


def fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def text(run: pathlib.Path, name: str) -> str:
    p = run / name
    return p.read_text().strip() if p.is_file() else ""


def tests_line(run: pathlib.Path) -> str:
    lines = [line for line in text(run, "tests.log").splitlines() if line.strip()]
    return lines[-1] if lines else "no result"


def verify_lines(cost: dict | None) -> list[str]:
    if not cost or not cost.get("rows"):
        return ["verification cost: no result (see verify.log)"]
    out = [
        "| mode | dtype | t_step ms | t_verify / t_step | EAGLE-3 drafting / t_step |",
        "|---|---|---|---|---|",
    ]
    for r in cost["rows"]:
        t1 = r.get("t_step")
        ratios = " ".join(
            f"{k.removeprefix('t_verify_')} {fmt(r.get(k) and t1 and r[k] / t1, '.2f')}"
            for k in sorted(_keys(cost, "t_verify_"))
        )
        propose = " ".join(
            f"{k.removeprefix('t_propose_eagle3_')} {fmt(r.get(k) and t1 and r[k] / t1, '.2f')}"
            for k in sorted(_keys(cost, "t_propose_eagle3_"))
        )
        mode = "compiled" if r.get("compiled") else "eager"
        out.append(f"| {mode} | {r.get('dtype')} | {fmt(t1 and t1 * 1e3, '.2f')} | {ratios} | {propose} |")
    return out


def _keys(cost: dict, prefix: str) -> set[str]:
    return {k for r in cost["rows"] for k in r if k.startswith(prefix)}


def engine_lines(engine: dict | None, cost: dict | None) -> list[str]:
    """Engine rows against the ceiling (K+1)·t_step/t_verify of the same mode (oracle drafts: every
    token accepted, drafting free), and the graph counters of the timed runs."""
    if not engine or not engine.get("rows"):
        return ["engine: no result (see engine.log)"]
    costs = {("compiled" if r.get("compiled") else "eager"): r for r in (cost or {}).get("rows", [])}
    out = [
        "| mode | method | tok/s | speedup | ceiling | of it | tau | same | graphs | breaks | cg skips | cg re-rec |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in engine["rows"]:
        c, k = costs.get(r["mode"], {}), r.get("k", 0)
        t_verify = c.get(f"t_verify_chain{k}") if k else None
        ceiling = (k + 1) * c["t_step"] / t_verify if t_verify and "chain" in r["method"] else None
        g = r.get("graphs_after_warmup") or {}
        out.append(
            f"| {r['mode']} | {r['method']} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {fmt(ceiling, '.2f')} | "
            f"{fmt(ceiling and r['speedup'] / ceiling, '.2f')} | {r['mean_acceptance_length']:.2f} | "
            f"{'yes' if r['same_as_plain'] else 'no'} | {g.get('graphs', 'n/a')} | {g.get('graph_breaks', 'n/a')} | "
            f"{g.get('cudagraph_skips', 'n/a')} | {g.get('cudagraph_rerecords', 'n/a')} |"
        )
    return out


def train_line(check: dict | None) -> str:
    if not check:
        return "training vs plan: no result (see train.log)"
    m, t = check["memory"], check["tokens_per_s"]
    return (
        f"training {check['recipe']} ({'random target' if check.get('random_target') else 'real target'}, "
        f"{check['tokens_per_step']} tokens/step): memory plan {m['planned_bytes'] / 1e9:.1f} GB vs measured "
        f"{m['measured_bytes'] / 1e9:.1f} GB ({m['ratio']:.2f}x); tokens/s plan {t['planned']:.0f} vs measured "
        f"{t['measured']:.0f} ({t['ratio']:.2f}x) at {check['matmul_tflops']['used']:.1f} TFLOP/s measured"
    )


def summary(run: pathlib.Path, shape: str) -> str:
    cost, engine = load(run, "verify_cost.json"), load(run, "engine.json")
    matmul = load(run, "matmul.json")
    lines = [
        text(run, "gpu.txt") or "no gpu.txt",
        f"steps: {'; '.join(text(run, 'steps.txt').splitlines()) or 'none finished'}",
        f"(a) gpu tests: {tests_line(run)}",
        f"(b) verification cost, {shape}, context {(cost or {}).get('rows', [{}])[0].get('context', 'n/a')}:",
        *verify_lines(cost),
        f"(c) engine, {shape}, oracle drafts (every token accepted); counters over the timed runs:",
        *engine_lines(engine, cost),
        f"(d) {train_line(load(run, 'plan_check.json'))}",
        "(e) matmul rate: "
        + (f"{matmul['tflops']:.1f} TFLOP/s {matmul['dtype']}" if matmul else "no result (see matmul.log)"),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(pathlib.Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "?"))
