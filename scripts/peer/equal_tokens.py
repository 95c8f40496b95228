"""Which draft is 'equal tokens': the faster trainer's, at the slower one's token count."""

import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
o = json.loads((out / "ours/train_summary.json").read_text())
s = json.loads((out / "speculators/summary.json").read_text())
if o["tokens"] >= s["tokens"]:  # ours: the saved step nearest the peer's token count
    per_step = o["tokens"] / o["steps"]
    steps = sorted(int(p.name[5:]) for p in (out / "ours").glob("step-*"))
    best = min(steps, key=lambda n: abs(n * per_step - s["tokens"]))
    print(f"ours {out / 'ours' / f'step-{best:07d}'} {round(best * per_step)}")
else:  # the peer: a second run stopped at our token count
    print(f"peer {o['tokens']} {o['tokens']}")
