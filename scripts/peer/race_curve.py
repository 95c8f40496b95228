"""τ against training minutes for both trainers of one or more equal-budget races (the long.json
files `scripts/peer/long.sh` writes), with the standard errors as error bars: a table on stdout
and a PNG.

    python scripts/peer/race_curve.py results/peer-race/long30/long.json results/peer-race/long90/long.json \
        --png results/peer-race/race-curve.png

Each race contributes its two points per trainer (its AT_S draft and its final one). Where two
races measured the same trainer at the same minute, the first file given wins. Nothing is
measured here: every point is a figure of one of the long.json files, which keep the stamps.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def points(files: list[pathlib.Path]) -> dict[str, dict[float, dict]]:
    """trainer -> minutes -> {tau, tau_se, steps, tokens, source}."""
    out: dict[str, dict[float, dict]] = {}
    for f in files:
        race = json.loads(f.read_text())
        for trainer, res in race["results"].items():
            for point, seconds in (("at", race["at_s"]), ("final", race["budget_s"])):
                p = res[point]
                # a final point may carry no step of its own (speculators'; ours without a step-*
                # checkpoint): the run's end is the trainer's own steps and tokens
                fig = {"tau": p["tau"], "tau_se": p["tau_se"]}
                fig["step"] = p.get("step", res["steps"] if point == "final" else None)
                fig["tokens"] = p.get("tokens", res["tokens"] if point == "final" else None)
                out.setdefault(trainer, {}).setdefault(round(seconds / 60, 1), {**fig, "source": str(f)})
    return out


def table(curves: dict[str, dict[float, dict]]) -> str:
    rows = ["| trainer | minutes | step | tokens | τ ± standard error | from |", "|---|---|---|---|---|---|"]
    for trainer, pts in curves.items():
        for m in sorted(pts):
            p = pts[m]
            rows.append(
                f"| {trainer} | {m:g} | {p['step']} | {p['tokens'] or 0:,} | {p['tau']:.3f} ± {p['tau_se']:.3f} | "
                f"{p['source']} |"
            )
    return "\n".join(rows)


def draw(curves: dict[str, dict[float, dict]], png: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for trainer, pts in curves.items():
        ms = sorted(pts)
        ax.errorbar(
            ms, [pts[m]["tau"] for m in ms], yerr=[pts[m]["tau_se"] for m in ms], marker="o", capsize=4, label=trainer
        )
    ax.set_xlabel("training minutes (wall clock, machine to itself)")
    ax.set_ylabel("τ (mean acceptance length, K=4)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("races", nargs="+", type=pathlib.Path, help="long.json files of scripts/peer/long.sh")
    ap.add_argument("--png", type=pathlib.Path, required=True)
    ap.add_argument("--title", default="EAGLE-3 for SmolLM2 at equal wall-clock, τ in vLLM-CPU (± 1 SE)")
    args = ap.parse_args()
    missing = [str(f) for f in args.races if not f.is_file()]
    if missing:
        print(f"race_curve: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    curves = points(args.races)
    print(table(curves))
    draw(curves, args.png, args.title)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
