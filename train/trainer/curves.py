"""The training summary's picture: loss and measured τ against tokens seen (`curves.png`).

τ through the runtime often peaks while the loss keeps falling; the plot makes the peak, and
the step best/ was taken at, visible beside the run, each τ with its standard error over the
held-out prompts and the step-0 τ as a line. matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

import logging
import pathlib

log = logging.getLogger("draftsmith.train")

CURVES = "curves.png"
LOSS_KEYS = ("train/loss", "eval/loss")
TAU_KEY = "eval/mean_acceptance_length"
TAU_SE_KEY = "eval/mean_acceptance_length_se"


def series(history: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(tokens, values) of `key` in the trainer's history (records carry `tokens`)."""
    points = [(h["tokens"], h[key]) for h in history if key in h and "tokens" in h]
    return [p[0] for p in points], [p[1] for p in points]


def plot_curves(history: list[dict], path: pathlib.Path, best: dict | None = None) -> pathlib.Path | None:
    """Write the loss curves (left axis) and τ (right axis) against tokens seen; None when there
    is nothing to plot or matplotlib is missing (the run's results stand without the picture)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no %s (pip install matplotlib)", path.name)
        return None
    if not any(series(history, key)[0] for key in (*LOSS_KEYS, TAU_KEY)):
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for key, style in zip(LOSS_KEYS, ("-", "o--")):
        x, y = series(history, key)
        if x:
            ax.plot(x, y, style, label=key, markersize=3)
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("loss")
    x, y = series(history, TAU_KEY)
    if x:
        tau_ax = ax.twinx()
        # error bars: τ's standard error over the held-out prompts (0 where a record has none)
        err = [h.get(TAU_SE_KEY) or 0.0 for h in history if TAU_KEY in h and "tokens" in h]
        tau_ax.errorbar(x, y, yerr=err, fmt="s-", color="tab:red", label="τ ± standard error", markersize=4, capsize=2)
        if x[0] == 0:  # measured before training: what training added is the distance from this line
            tau_ax.axhline(y[0], color="tab:red", linestyle=":", linewidth=1, label="τ at step 0")
        if best is not None and best.get("tokens") is not None:
            tau_ax.plot([best["tokens"]], [best["tau"]], "*", color="gold", markersize=14, label="best/")
        tau_ax.set_ylabel("τ, measured through the runtime")
        tau_ax.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("loss and τ against tokens seen")
    fig.tight_layout()
    tmp = path.with_name(f".tmp-{path.name}")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)  # a reader sees the old picture or the new one
    return path
