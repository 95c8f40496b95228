"""The race's table: per trainer its steps, tokens and tokens/s over the budget, τ in vLLM after
equal time and after equal tokens, and τ per MT-Bench category / HumanEval. Writes OUT/race.json
and OUT/race.md (the results docs' table).

    python scripts/peer/report.py OUT BUDGET_S
"""

import json
import pathlib
import sys

from draftsmith.evaluation.benchkit import markdown_table
from draftsmith.evaluation.report import write_report

out, budget = pathlib.Path(sys.argv[1]), float(sys.argv[2])


def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.is_file() else None


eq = (out / "equal-tokens.txt").read_text().split() if (out / "equal-tokens.txt").is_file() else None
rows = {}
for label, summary, tau_name, tokens_key in (
    ("draftsmith", "ours/train_summary.json", "ours", "tokens"),
    ("speculators 0.9.0", "speculators/summary.json", "speculators", "tokens"),
):
    s, t = load(summary), load(f"tau-{tau_name}.json")
    if not s:
        continue
    # each trainer stops at the first step boundary past the budget: tokens/s over the budget
    t_eq = load(f"tau-{tau_name}-equal-tokens.json") or t  # the slower side's own final is its equal-tokens draft
    rows[label] = {
        "steps": s["steps"],
        "tokens": s[tokens_key],
        "tokens_per_s": round(s[tokens_key] / budget, 1),
        "tau_equal_time": t and t["tau"],
        "tau_equal_tokens": t_eq and t_eq["tau"],
        "per_position_equal_time": t and t["acceptance_rate_per_pos"],
        "by_domain_equal_time": t and {d: g["tau"] for d, g in t.get("by_domain", {}).items()},
    }
race = {"budget_s": budget, "equal_tokens": eq and int(eq[1]), "results": rows}
# machine, commit and date stamped as every benchmark's JSON; the command is the race's own
write_report(race, out / "race.json", argv=["bash", "scripts/peer/race.sh", sys.argv[2]])
domains = sorted({d for r in rows.values() for d in (r["by_domain_equal_time"] or {})})
head = ["trainer", "steps", "tokens", "tokens/s", "τ equal time", f"τ equal tokens ({race['equal_tokens']})", *domains]
cells = [
    [name, r["steps"], r["tokens"], r["tokens_per_s"], r["tau_equal_time"], r["tau_equal_tokens"]]
    + [(r["by_domain_equal_time"] or {}).get(d) for d in domains]
    for name, r in rows.items()
]
table = markdown_table(head, cells)
(out / "race.md").write_text(table + "\n")
print(table)
print(f"-> {out / 'race.json'}, {out / 'race.md'}")
