"""What a bench run shows and saves: the text tables of `draftsmith bench` / `eval` and of a
side-by-side comparison (per method, per category, the step costs alone and in the loop), and the
result files (JSON, the acceptance plot), with the output paths checked before any work.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.divergence import divergence_line
from draftsmith.evaluation.hf_anchors import anchors_line
from draftsmith.evaluation.report import stamp, write_json_atomic


def time_split_line(row: dict) -> str:
    """Where a generation's time went, plain vs speculative: the decode steps (what the speed model
    predicts) and the rest (prefill, stop checks, host work), and the decode phase's own speedup."""
    sp = row["time_split_s"]
    p, s = sp["plain"], sp["speculative"]
    return (
        f"per generation: plain {p['in_steps']:.2f} s in steps + {p['outside_steps']:.2f} s outside (prefill, host); "
        f"speculative {s['in_steps']:.2f} s + {s['outside_steps']:.2f} s; "
        f"decode-phase speedup {row['speedup_decode']:.2f}x"
    )


def format_compare(result: dict) -> str:
    lines = [
        f"target {result['target']}  T={result['temperature']}  {result['dtype']} on {result['hardware']}  "
        f"{result['num_prompts']} prompts x {result['max_new_tokens']} tokens"
    ]
    if result.get("target_note"):
        lines.append(f"note: the target was {result['target_note']}")
    lines.append(
        f"{'method':<22}{'nodes/step':>11}{'tau':>7}{'accept':>8}{'tokens/s':>10}"
        f"{'speedup':>9}{'predicted':>10}{'match':>7}  per-position"
    )
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for name, r in result["methods"].items():
        per_step = r["drafted_tokens"] / r["drafts"] if r.get("drafts") else 0
        match = {True: "yes", False: "NO", None: "-"}[r["outputs_match_plain"]]
        lines.append(
            f"{name:<22}{per_step:>11.1f}{r['mean_acceptance_length']:>7.2f}{fmt(r['draft_acceptance_rate'], '.2f'):>8}"
            f"{r['tokens_per_s']:>10.2f}{r['speedup']:>8.2f}x{fmt(r.get('predicted_speedup'), '.2f'):>9}x{match:>7}  "
            + " ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
        )
    for name, r in result["methods"].items():  # adaptive K: how often each K was drafted (0: a plain step)
        if r.get("adaptive_k"):
            chosen = ", ".join(f"K={k} x{n}" for k, n in r["adaptive_k"]["k_counts"].items())
            lines.append(f"{name}: adaptive K in 0..{r['adaptive_k']['k_max']}, steps {chosen}")
    costed = {n: r for n, r in result["methods"].items() if r.get("step_costs_s")}
    if costed:  # the same step costs measured alone (measure_step_costs) and inside the loop
        lines.append(
            f"{'step costs, x a decode step':<28}{'draft alone':>12}{'in loop':>9}{'verify alone':>13}{'in loop':>9}"
            f"{'predicted alone':>16}{'in loop':>9}{'measured':>10}{'decode':>9}"
        )
        for name, r in costed.items():
            c, t = r["step_costs_s"], r.get("step_costs_in_loop_s")
            loop = (lambda key: f"{t[key] / t['t_step']:.2f}x") if t else (lambda key: "-")
            lines.append(
                f"{name:<28}{c['t_draft_k'] / c['t_step']:>11.2f}x{loop('t_draft'):>9}"
                f"{c['t_verify'] / c['t_step']:>12.2f}x"
                f"{loop('t_verify'):>9}{r['predicted_speedup']:>15.2f}x"
                f"{(format(r['predicted_speedup_in_loop'], '.2f') + 'x') if t else '-':>9}{r['speedup']:>9.2f}x"
                f"{(format(r['speedup_decode'], '.2f') + 'x') if t else '-':>9}"
            )
    lines += group_table(result["methods"])
    return "\n".join(lines)


GROUP_FIELDS = ("by_domain", "by_set", "by_turn")


def group_columns(rows: dict) -> list[tuple[str, str]]:
    """(field, group) columns over all methods: categories in order of appearance, then sets and
    turns; a set that is also a category (HumanEval's one) is shown once."""
    cols = [(f, g) for f in GROUP_FIELDS for g in dict.fromkeys(g for r in rows.values() for g in r.get(f, {}))]
    return [(f, g) for f, g in cols if not (f == "by_set" and ("by_domain", g) in cols)]


def group_table(rows: dict) -> list[str]:
    """Methods x (categories, sets, turns, overall): τ / speedup per cell, as the EAGLE and
    SpecForge papers lay out MT-Bench. Nothing when there is only one category."""
    cols = group_columns(rows)
    if len(cols) < 2:
        return []
    cell = lambda c: (
        "-"
        if c is None
        else f"{c['mean_acceptance_length']:.2f}" + (f" /{c['speedup']:.2f}x" if c.get("speedup") is not None else "")
    )  # noqa: E731
    width = max(13, *(len(g) + 1 for _, g in cols))
    lines = [f"{'by domain: tau / speedup':<26}" + "".join(f"{g:>{width}}" for _, g in cols) + f"{'overall':>{width}}"]
    for name, r in rows.items():
        lines.append(
            f"{name:<26}" + "".join(f"{cell(r.get(f, {}).get(g)):>{width}}" for f, g in cols) + f"{cell(r):>{width}}"
        )
    return lines


def kernel_lines(cpu_matmul: dict | None) -> list[str]:
    """What --cpu-matmul / --draft-dtype chose for each role, and why (bench's and crosscheck's reports)."""
    lines = []
    for role, c in (cpu_matmul or {}).items():
        shapes = c.get("shapes") or {}
        each = [(f"{role} {shape}", got) for shape, got in shapes.items()] if len(shapes) > 1 else [(role, c)]
        for what, got in (*each, (f"{role} LM head", c.get("lm_head"))):
            if got:
                prefill = "; prefills too" if got.get("prompt_rows") else ""
                name = got.get("kernel") or got.get("dtype")
                if got.get("one_row") not in (None, name):  # auto: one-row products on their own choice
                    name += f", one row {got['one_row']}"
                lines.append(f"{what}: {name} ({got['why']}{prefill})")
    return lines


def format_table(result: dict) -> str:
    """A plain-text table of the methods plus the acceptance summary."""
    tree = result.get("tree")
    shape = f"tree {tree}" if tree else f"k={result['num_speculative_tokens']}"
    lines = [
        f"target {result['target']}  draft {result['draft']}  {shape}  "
        f"T={result['temperature']}  {result['dtype']} on {result['hardware']}",
        f"{'method':<13}{'tokens/s':>10}{'vs plain':>10}{'match':>8}",
    ]
    if result.get("target_note"):
        lines.insert(1, f"note: the target was {result['target_note']}")
    if result.get("placement"):
        lines.insert(1, placement_line(result["placement"]))
    if result.get("verification", "lossless") != "lossless":
        lines.insert(
            1, f"verification {result['verification']}: NOT lossless, outputs may differ from the target's distribution"
        )
    for name, m in result.get("methods", {}).items():
        match = {True: "yes", False: "NO", None: "-"}[m["outputs_match_plain"]]
        lines.append(f"{name:<13}{m['tokens_per_s']:>10.2f}{m['speedup']:>9.2f}x{match:>8}")
    if result.get("baselines"):
        lines.append(anchors_line(result["baselines"]))
    if result.get("first_divergence"):
        lines.append(divergence_line(result["first_divergence"]))
    rate = result["draft_acceptance_rate"]
    se = result.get("mean_acceptance_length_se")
    lines.append(
        f"mean_acceptance_length {result['mean_acceptance_length']:.2f}"
        + (f" ± {se:.2f}" if se is not None else "")
        + "   "
        f"draft_acceptance_rate {rate if rate is None else round(rate, 3)}   drafts {result['drafts']}"
    )
    lines.append("per_position_acceptance " + " ".join(f"{a:.2f}" for a in result["per_position_acceptance"]))
    if result.get("adaptive_k"):
        a, f = result["adaptive_k"], result["fixed_k"]
        chosen = ", ".join(f"K={key} x{n}" for key, n in a["k_counts"].items())
        lines.append(f"adaptive K (0..{a['k_max']}; K=0: a plain step), steps: {chosen}")
        lines.append(
            f"fixed K={f['num_speculative_tokens']} beside it: mean_acceptance_length {f['mean_acceptance_length']:.2f}"
            + (f" ± {f['mean_acceptance_length_se']:.2f}" if f.get("mean_acceptance_length_se") is not None else "")
            + f"  speedup {f['speedup']:.2f}x  predicted {f['predicted_speedup']:.2f}x"
        )
    if "speedup" in result:
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
        lines.append(
            f"speedup {fmt(result['speedup'])}   predicted {fmt(result['predicted_speedup'])}   "
            f"vs hf_assisted {fmt(result['speedup_vs_hf_assisted'])}   plain vs hf_plain "
            f"{fmt(result['plain_vs_hf_plain'])}"
        )
    c, t = result.get("step_costs_s"), result.get("step_costs_in_loop_s")
    if c and "t_draft_k" in c:  # alone (measure_step_costs) vs as the loop ran them, in ms
        ms = lambda v: f"{v * 1e3:.1f}"  # noqa: E731
        lines.append(
            f"step costs alone: t_step {ms(c['t_step'])} ms  t_draft {ms(c['t_draft_k'])} ms  t_verify "
            f"{ms(c['t_verify'])} ms"
            + (
                f"   in loop: {ms(t['t_step'])} / {ms(t['t_draft'])} / {ms(t['t_verify'])} ms, predicted "
                f"{fmt(result['predicted_speedup_in_loop'])}"
                if t
                else ""
            )
        )
    if result.get("time_split_s"):
        lines.append(time_split_line(result))
    graphs = result.get("graphs_after_warmup")
    compiled = result.get("compiled") or any(a["compiled"] for a in (result.get("baselines") or {}).values())
    if graphs and (compiled or any(graphs.values())):  # eager and healthy: nothing to say
        lines.append(graphs_line(graphs))
    if result.get("target_forward"):
        lines.append(f"target forward: {result['target_forward']}")
    if result.get("draft_forward"):
        lines.append(f"draft forward: {result['draft_forward']}")
    lines += kernel_lines(result.get("cpu_matmul"))
    for field in GROUP_FIELDS:
        for g, m in result.get(field, {}).items():
            rate, speed = m["draft_acceptance_rate"], m.get("speedup")
            lines.append(
                f"  {field[3:]:<6} {g:<11} mean_acceptance_length {m['mean_acceptance_length']:.2f}  "
                f"draft_acceptance_rate {'n/a' if rate is None else f'{rate:.3f}'}  drafts {m['drafts']}"
                + ("" if speed is None else f"  speedup {speed:.2f}x")
                + "  per_position "
                + " ".join(f"{a:.2f}" for a in m["per_position_acceptance"])
            )
    return "\n".join(lines)


def placement_line(placement: dict) -> str:
    """A target split over devices: its layers per device and what that means for the figures."""
    split = ", ".join(f"{d} {n} layers" for d, n in placement["layers_per_device"].items())
    return f"placement: {split}; {placement['caveat']}"


def graphs_line(graphs: dict) -> str:
    """The graph counters of the timed runs; anything but zeros means the compiled path was not
    what was measured (a recompile or a re-record inside the timing, or an eager fallback)."""
    cells = "  ".join(f"{k} {v}" for k, v in graphs.items())
    return f"graphs after warm-up: {cells}" + ("" if not any(graphs.values()) else "   (not all 0: see torch's log)")


def write_json(result: dict, path: str) -> None:
    """`result` as indented JSON, its folder made (`--json runs/x.json` on a fresh clone), written
    atomically: a reader (or a resumed run) sees the old file or the new one, never half."""
    write_json_atomic(result, path)


PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def check_output_path(path: str, flag: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Before any work (issue 16): refuse, in one line, an output path that cannot be written, so
    a finished run is never lost to it. Missing folders are fine (created when writing)."""
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise DraftsmithError(f"{flag} {path}: name a {' / '.join(suffixes)} file")
    if p.is_dir():
        raise DraftsmithError(
            f"{flag} {path} is a directory: name a file in it, e.g. {p / ('result' + (suffixes or ('.json',))[0])}"
        )
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise DraftsmithError(f"{flag} {path}: {folder} is a file, not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise DraftsmithError(f"{flag} {path}: the file is read-only")
    try:
        with tempfile.TemporaryFile(dir=folder):  # the only sure test (root passes os.access, read-only mounts do not)
            pass
    except OSError as e:
        raise DraftsmithError(
            f"{flag} {path}: cannot write in {folder} ({e.strerror or e}); pick a writable folder"
        ) from None


def save_outputs(result: dict, json_path: str | None, plot_path: str | None, label: str) -> list[str]:
    """Write the JSON and the plot; the paths written. Whatever fails, the results are kept: a
    JSON that cannot be written where asked goes to a temporary file, and the one error names it."""
    written, problems = [], []
    if json_path:
        try:
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            write_json(stamp(result), json_path)  # machine, commit, date, command: as every benchmark's JSON
            written.append(json_path)
        except OSError as e:
            problems.append(f"could not write --json {json_path} ({e.strerror or e})")
    if plot_path:
        try:
            Path(plot_path).parent.mkdir(parents=True, exist_ok=True)
            plot_acceptance({label: result}, plot_path)
            written.append(plot_path)
        except (OSError, ValueError) as e:  # ValueError: a format matplotlib cannot write
            problems.append(f"could not write --plot {plot_path} ({getattr(e, 'strerror', None) or e})")
    if problems:
        kept = json_path if json_path in written else None
        if kept is None:
            fd, kept = tempfile.mkstemp(prefix="draftsmith-results-", suffix=".json")
            os.close(fd)
            write_json(result, kept)
        raise DraftsmithError(f"{'; '.join(problems)}; the results are saved in {kept}")
    return written


def plot_acceptance(results: dict[str, dict], path: str) -> None:
    """Per-position acceptance of one or more runs (label -> result) as a PNG."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, r in results.items():
        acc = r["per_position_acceptance"]
        ax.plot(range(1, len(acc) + 1), acc, marker="o", label=f"{label} (τ={r['mean_acceptance_length']:.2f})")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance (fraction of drafts)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
