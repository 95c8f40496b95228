"""scripts/peer: the race's equal-tokens pick and its table, on synthetic run folders (the race
itself needs the speculators and vLLM venvs: scripts/peer/race.sh)."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _runs(tmp_path, ours_tokens, ours_steps, peer_tokens, saved=(5, 10, 15, 20)):
    (tmp_path / "ours").mkdir()
    (tmp_path / "speculators").mkdir()
    (tmp_path / "ours/train_summary.json").write_text(json.dumps({"steps": ours_steps, "tokens": ours_tokens}))
    (tmp_path / "speculators/summary.json").write_text(json.dumps({"steps": 9, "tokens": peer_tokens}))
    for n in saved:
        (tmp_path / "ours" / f"step-{n:07d}").mkdir()


def _script(name, *args):
    out = subprocess.run(
        [sys.executable, f"scripts/peer/{name}", *map(str, args)], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_equal_tokens_takes_our_nearest_step_when_we_are_faster(tmp_path):
    _runs(tmp_path, ours_tokens=40960, ours_steps=20, peer_tokens=23000)  # 2048 tokens per step
    side, path, tokens = _script("equal_tokens.py", tmp_path).split()
    assert side == "ours" and path.endswith("step-0000010") and tokens == "20480"


def test_equal_tokens_asks_for_a_second_peer_run_when_it_is_faster(tmp_path):
    _runs(tmp_path, ours_tokens=20480, ours_steps=10, peer_tokens=30000)
    assert _script("equal_tokens.py", tmp_path).split() == ["peer", "20480", "20480"]


def test_the_race_table(tmp_path):
    _runs(tmp_path, ours_tokens=40960, ours_steps=20, peer_tokens=23000)
    (tmp_path / "equal-tokens.txt").write_text("ours 20480\n")

    def tau(name, value, coding):
        by = {"coding": {"tau": coding}, "humaneval": {"tau": value}}
        (tmp_path / f"tau-{name}.json").write_text(
            json.dumps({"tau": value, "acceptance_rate_per_pos": [0.3, 0.1], "by_domain": by})
        )

    tau("ours", 1.4, 1.5)
    tau("ours-equal-tokens", 1.3, 1.35)
    tau("speculators", 1.25, 1.2)
    _script("report.py", tmp_path, 600)
    race = json.loads((tmp_path / "race.json").read_text())
    ours, peer = race["results"]["draftsmith"], race["results"]["speculators 0.9.0"]
    assert (ours["tau_equal_time"], ours["tau_equal_tokens"], ours["tokens_per_s"]) == (1.4, 1.3, round(40960 / 600, 1))
    assert (peer["tau_equal_time"], peer["tau_equal_tokens"]) == (1.25, 1.25)  # its own final: the slower side
    assert race["command"] == "bash scripts/peer/race.sh 600" and race["machine"]["device"] == "cpu"
    table = (tmp_path / "race.md").read_text().splitlines()
    assert table[0].startswith("| trainer |") and "τ equal tokens (20480)" in table[0] and "coding" in table[0]
    assert table[2].startswith("| draftsmith | 20 | 40960 |") and "| 1.4 | 1.3 |" in table[2]


def test_measure_tau_pools_acceptance_over_prompts_and_domains():
    """measure_tau's tally (vLLM itself is replaced by engines with known counts)."""
    import argparse
    import runpy
    from types import SimpleNamespace

    tau = runpy.run_path(str(ROOT / "scripts" / "peer" / "measure_tau.py"))

    class Engine:
        def __init__(self, outs):
            self.outs = iter(outs)

        def generate(self, ids, max_new_tokens, stop):
            return next(self.outs)

    def out(ids, drafts, accepted, per_pos):
        return SimpleNamespace(
            output_ids=ids, drafts=drafts, draft_tokens=2 * drafts, accepted_tokens=accepted,
            accepted_per_pos=per_pos, elapsed_s=1.0,
        )  # fmt: skip

    spec = Engine([out([1, 2, 3], 2, 3, [2, 1]), out([4, 5], 1, 0, [0, 0])])
    plain = Engine([out([1, 2, 3], 0, 0, []), out([4, 6], 0, 0, [])])
    prompts = [SimpleNamespace(ids=[7], domain="coding"), SimpleNamespace(ids=[8, 9], domain="humaneval")]
    args = argparse.Namespace(k=2, max_new_tokens=4)
    result = {"per_prompt": []}
    totals = tau["decode"]({"spec": spec, "plain": plain}, prompts, args, [0], result["per_prompt"])
    tau["summarise"](result, totals, len(prompts), True)
    assert result["tau"] == 2.0 and result["accepted_per_pos"] == [2, 1] and result["drafts"] == 3
    assert result["acceptance_rate_per_pos"] == [round(2 / 3, 4), round(1 / 3, 4)]
    assert result["agree"] == "1/2" and [r["agrees_with_plain"] for r in result["per_prompt"]] == [True, False]
    assert result["by_domain"]["coding"]["tau"] == 2.5 and result["by_domain"]["humaneval"]["tau"] == 1.0
    assert result["tokens_per_s"] == 2.5 and result["speedup"] == 1.0


def _long(path, budget_s, at_s, ours, peer):
    """A long.json as scripts/peer/long_report.py writes it: (tau, se, step) at AT_S and the end."""

    def side(at, final):
        return {p: {"tau": t, "tau_se": se, "step": s, "tokens": 2048 * s} for p, (t, se, s) in
                (("at", at), ("final", final))}  # fmt: skip

    results = {"draftsmith": side(*ours), "speculators 0.9.0": side(*peer)}
    for r in results.values():
        r.update(steps=r["final"]["step"], tokens=r["final"]["tokens"])
    # as long_report writes it: speculators' final point is its tau alone, the steps are the run's
    del results["speculators 0.9.0"]["final"]["step"], results["speculators 0.9.0"]["final"]["tokens"]
    path.write_text(json.dumps({"budget_s": budget_s, "at_s": at_s, "results": results}))
    return path


def test_race_curve_joins_the_races_by_minute(tmp_path):
    a = _long(tmp_path / "a.json", 1800, 900, ours=((1.24, 0.01, 90), (1.3, 0.01, 170)), peer=((1.16, 0.01, 49),
              (1.21, 0.01, 102)))  # fmt: skip
    # the second race measured ours at 30 minutes again (another value): the first file given wins
    b = _long(tmp_path / "b.json", 5400, 1800, ours=((9.9, 0.5, 170), (1.45, 0.02, 500)), peer=((1.22, 0.01, 100),
              (1.33, 0.02, 300)))  # fmt: skip
    png = tmp_path / "curve.png"
    rows = _script("race_curve.py", a, b, "--png", png).splitlines()
    ours = [r for r in rows if r.startswith("| draftsmith |")]
    peer = [r for r in rows if r.startswith("| speculators 0.9.0 |")]
    assert [r.split(" | ")[1] for r in ours] == ["15", "30", "90"] and len(peer) == 3
    assert "| 1.300 ± 0.010 |" in ours[1] and str(a) in ours[1] and "9.9" not in "".join(rows)
    assert "| 90 | 500 | 1,024,000 | 1.450 ± 0.020 |" in ours[2]
    assert "| 30 | 102 |" in peer[1] and str(a) in peer[1]  # a's final, not b's 1.22 at the same minute
    assert "| 90 | 300 | 614,400 | 1.330 ± 0.020 |" in peer[2]  # its final: the run's own steps and tokens
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_race_curve_names_a_missing_race(tmp_path):
    out = subprocess.run([sys.executable, "scripts/peer/race_curve.py", tmp_path / "none.json", "--png",
                          tmp_path / "x.png"], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2 and "no such file" in out.stderr and "none.json" in out.stderr
