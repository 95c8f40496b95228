"""The long race's table (scripts/peer/long.sh): per trainer its steps and tokens, and τ in vLLM with
its standard error at the mid-run draft and at the end of the budget; the difference of the two
trainers at each point with the standard error of the difference, unpaired and paired over the
prompts (both drafts decode the same prompts, so what the prompts share cancels). Writes
OUT/long.json, OUT/long.md.

    python scripts/peer/long_report.py OUT OURS_RUN BUDGET_S AT_S [OURS_AT [OURS_FINAL]]

OURS_AT, OURS_FINAL: our checkpoints at AT_S and at the end of the budget (each one's
trainer_state.json gives its step, tokens and training seconds); without them, the run's best/
step as its summary records it, and the run's end.
"""

import json
import math
import os
import pathlib
import sys

from draftsmith.evaluation.benchkit import markdown_table
from draftsmith.evaluation.report import write_report
from draftsmith.infer.metrics import paired_ratio_difference

out, ours_run, budget, at = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ours_at_dir = pathlib.Path(sys.argv[5]) if len(sys.argv) > 5 else None
ours_final_dir = pathlib.Path(sys.argv[6]) if len(sys.argv) > 6 else None


def load(p):
    p = pathlib.Path(p)
    return json.loads(p.read_text()) if p.is_file() else None


def tau(name):
    t = load(out / f"tau-{name}.json")
    return (
        None
        if t is None
        else {k: t.get(k) for k in ("tau", "tau_se", "drafts", "num_prompts", "acceptance_rate_per_pos")}
    )


ours_summary, peer_summary = load(ours_run / "train_summary.json"), load(out / "speculators/summary.json")
peer_at = next(
    (json.loads(line) for line in (out / "speculators/train_log.jsonl").read_text().splitlines() if '"saved"' in line),
    None,
)


def checkpoint_state(folder):
    state = load(folder / "trainer_state.json") if folder else None
    if not state:
        return None
    return {"step": state["step"], "tokens": state["tokens"], "train_seconds": state.get("train_seconds"),
            "checkpoint": str(folder)}  # fmt: skip


ours_at = checkpoint_state(ours_at_dir) or {"step": (ours_summary.get("best") or {}).get("step")}
ours_end = checkpoint_state(ours_final_dir) or {"steps": ours_summary["steps"], "tokens": ours_summary["tokens"]}
rows = {
    "draftsmith": {
        "steps": ours_end.get("step", ours_end.get("steps")),
        "tokens": ours_end["tokens"],
        "at": {**ours_at, **(tau("ours-at") or {})},
        "final": {**ours_end, **(tau("ours-final") or {})},
    },
    "speculators 0.9.0": {
        "steps": peer_summary["steps"],
        "tokens": peer_summary["tokens"],
        "at": {
            "step": peer_at and peer_at["step"],
            "tokens": peer_at and peer_at["tokens"],
            **(tau("speculators-at") or {}),
        },
        "final": tau("speculators-final"),
    },
}


def paired(a_name, b_name):
    """(difference, standard error) paired over the prompts both measurements decoded."""
    a, b = load(out / f"tau-{a_name}.json"), load(out / f"tau-{b_name}.json")
    if not (a and b) or [r["i"] for r in a["per_prompt"]] != [r["i"] for r in b["per_prompt"]]:
        return None
    pa, pb = a["per_prompt"], b["per_prompt"]
    d, se = paired_ratio_difference([r["accepted"] for r in pa], [r["drafts"] for r in pa],
                                    [r["accepted"] for r in pb], [r["drafts"] for r in pb])  # fmt: skip
    return {"ours_minus_peer": round(d, 4), "se": round(se, 4), "beyond_2se": abs(d) > 2 * se, "prompts": len(pa)}


def diff(a, b, names):
    if not (a and b and a.get("tau") and b.get("tau")):
        return None
    se = math.sqrt((a.get("tau_se") or 0) ** 2 + (b.get("tau_se") or 0) ** 2)
    d = a["tau"] - b["tau"]
    return {"ours_minus_peer": round(d, 4), "se": round(se, 4), "beyond_2se": abs(d) > 2 * se,
            "paired": paired(*names)}  # fmt: skip


o, s = rows["draftsmith"], rows["speculators 0.9.0"]
report = {
    "budget_s": budget,
    "at_s": at,
    "results": rows,
    "difference_at": diff(o["at"], s["at"], ("ours-at", "speculators-at")),
    "difference_final": diff(o["final"], s["final"], ("ours-final", "speculators-final")),
}
# The command as typed: the knobs given in long.sh's environment, then the script.
KNOBS = ("OURS", "OURS_AT", "OURS_FINAL", "BUDGET_S", "AT_S", "RECIPE", "ROWS", "SCHEDULE", "OUT", "PROMPTS",
         "NPROMPTS", "MAXNEW", "K")  # fmt: skip
given = [f"{k}={os.environ[k]}" for k in KNOBS if os.environ.get(k)]
write_report(report, out / "long.json", argv=[*given, "bash", "scripts/peer/long.sh"])


def cell(t):
    return f"{t['tau']:.3f} ± {t['tau_se']:.3f}" if t and t.get("tau") and t.get("tau_se") is not None else "-"


table = markdown_table(
    ["trainer", "steps", "tokens", f"τ at {at / 60:g} min", f"τ at {budget / 60:g} min"],
    [[name, r["steps"], r["tokens"], cell(r["at"]), cell(r["final"])] for name, r in rows.items()],
)
(out / "long.md").write_text(table + "\n")
print(table)
print(json.dumps({k: report[k] for k in ("difference_at", "difference_final")}))
