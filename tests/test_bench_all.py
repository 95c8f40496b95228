"""scripts/bench_all.py: its kinds and their tables read from the registry, context-length
buckets, the aggregation over rounds, and the whole run on tiny settings (train, bench a round,
reuse the checkpoint and the round on a rerun, refuse to mix rounds measured with other settings)."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from draftsmith.evaluation.bench import context_buckets
from draftsmith.infer.engine import Engine
from draftsmith.models import load_drafter

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_all", ROOT / "scripts" / "bench_all.py")
bench_all = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_all)


def test_the_kinds_and_their_tables_are_the_registry_s():
    """A kind is benched when its registry entry declares `bench`; the script keeps no list of its own."""
    from draftsmith.kinds import KINDS

    benched = [name for name, kind in KINDS.items() if kind.bench is not None]
    assert list(bench_all.KINDS) == benched and benched
    for name in benched:
        b = KINDS[name].bench
        assert bench_all.STEPS_PER_MINUTE[name] == b.steps_per_minute > 0
        assert bench_all.TRAIN_FLAGS[name] == list(b.train_flags)
        methods = bench_all.METHODS[name]
        assert [(m, k) for m, k, _ in methods] == [(m, k) for m, k, _ in b.methods] and methods
        assert all((t is bench_all.TREE) == tree for (_, _, t), (_, _, tree) in zip(methods, b.methods))


def test_context_buckets_partition_the_steps(tiny_target):
    engine = Engine(tiny_target, load_drafter("truncated:6", tiny_target), 3)
    prompts = [[5 + i for i in range(n)] for n in (10, 40, 90)]
    results = [engine.generate(p, 30, eos_token_ids=()) for p in prompts]
    total = results[0].metrics.merge(results[1].metrics).merge(results[2].metrics)
    buckets = context_buckets(results, (32, 64, 100))
    assert set(buckets) <= {"<32", "32-63", "64-99", ">=100"} and len(buckets) >= 3
    assert sum(b["steps"] for b in buckets.values()) == total.drafts
    pooled = sum(b["mean_acceptance_length"] * b["steps"] for b in buckets.values()) / total.drafts
    assert pooled == pytest.approx(total.mean_acceptance_length)
    # the first step of a 10-token prompt verifies at context 11 (prompt + the prefill's token)
    assert results[0].steps[0][0] == 11 and results[2].steps[0][0] == 91


def _round(speedup, tau, match=True, ctx_steps=4):
    method = {
        "speedup": speedup,
        "tokens_per_s": 10 * speedup,
        "mean_acceptance_length": tau,
        "outputs_match_plain": match,
        "per_position_acceptance": [tau - 1, (tau - 1) / 2],
        "draft": "d",
        "drafter_kind": "eagle3",
        "by_domain": {"chat": {"mean_acceptance_length": tau, "speedup": speedup}},
        "by_context": {"<64": {"mean_acceptance_length": tau, "steps": ctx_steps}},
    }
    plain = {
        "speedup": 1.0,
        "tokens_per_s": 10.0,
        "mean_acceptance_length": 1.0,
        "outputs_match_plain": True,
        "by_domain": {"chat": {"mean_acceptance_length": 1.0, "speedup": 1.0}},
    }
    return {"methods": {"plain": plain, "m": method}}


def test_aggregate_medians_spread_and_pooled_buckets():
    rows = bench_all.aggregate([_round(0.5, 1.4), _round(0.9, 1.4, ctx_steps=12), _round(0.6, 1.6, match=False)])
    m = rows["m"]
    assert m["speedup"] == {"median": 0.6, "min": 0.5, "max": 0.9, "n": 3}
    assert m["mean_acceptance_length"]["median"] == 1.4 and m["mean_acceptance_length"]["max"] == 1.6
    assert m["outputs_match_plain"] is False and rows["plain"]["outputs_match_plain"] is True
    assert m["by_context"]["<64"]["steps"] == 20
    assert m["by_context"]["<64"]["mean_acceptance_length"] == pytest.approx((1.4 * 4 + 1.4 * 12 + 1.6 * 4) / 20)
    assert m["per_position_acceptance"][0] == pytest.approx(0.4)
    assert m["by_domain"]["chat"]["speedup"]["median"] == 0.6


def _groups_round(tau_writing, speedup):
    cell = lambda tau, sp: {
        "mean_acceptance_length": tau,
        "speedup": sp,
        "draft_acceptance_rate": (tau - 1) / 3,  # noqa: E731
        "per_position_acceptance": [tau - 1],
    }
    r = _round(speedup, tau_writing)
    r["methods"]["plain"]["by_domain"] = {"writing": cell(1.0, 1.0), "humaneval": cell(1.0, 1.0)}
    r["methods"]["m"].update(
        by_domain={"writing": cell(tau_writing, speedup), "humaneval": cell(2.5, 1.5)},
        by_turn={"turn1": cell(tau_writing, speedup), "turn2": cell(1.2, 0.9)},
        by_set={"mt-bench": cell(tau_writing, speedup), "humaneval": cell(2.5, 1.5)},
    )
    return r


def test_aggregate_and_table_carry_categories_sets_and_turns():
    rows = bench_all.aggregate([_groups_round(1.8, 1.1), _groups_round(1.8, 1.3)])
    m = rows["m"]
    assert list(m["by_domain"]) == ["writing", "humaneval"]  # the rounds' order (MT-Bench's), not sorted
    assert m["by_domain"]["writing"]["speedup"] == {"median": 1.2000000000000002, "min": 1.1, "max": 1.3, "n": 2}
    assert m["by_turn"]["turn2"]["mean_acceptance_length"]["median"] == 1.2
    assert m["by_set"]["humaneval"]["draft_acceptance_rate"] == pytest.approx(0.5)
    cpu = {
        "model": "Some CPU",
        "flags": {"avx2": True, "avx512f": True, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False},
        "cores": 2,
        "threads": 2,
    }
    meta = {
        "target": "t",
        "dtype": "float32",
        "device": "cpu",
        "hardware": "Some CPU, 2 threads",
        "cpu": cpu,
        "num_prompts": 4,
        "max_new_tokens": 8,
    }
    table = bench_all.markdown(
        {"pairs": {"p": {"meta": meta, "rounds": 2, "methods": rows, "training": {"m": "1 min"}}}}
    )
    assert "Some CPU (avx2 yes, avx512f yes, avx512_bf16 no, amx_bf16 no; 2 threads of 2 cores)" in table
    head = next(line for line in table.splitlines() if line.startswith("| method"))
    assert head.split(" | ")[3:8] == ["τ writing", "τ humaneval", "τ mt-bench", "τ turn1", "τ turn2"]
    row = next(line for line in table.splitlines() if line.startswith("| m |"))
    assert "| 1.80 (1.20×) | 2.50 (1.50×) |" in row and "| 1.20 (0.90×) |" in row


def test_a_round_on_mt_bench_and_humaneval(tiny_cache, tmp_path, monkeypatch):
    """bench_all's round on the standard sets (tiny fixtures in the packages' formats), then its table."""
    import argparse
    import dataclasses
    import gzip
    import hashlib

    from draftsmith.evaluation import prompts as prompt_sets

    mt, he = tmp_path / "question.jsonl", tmp_path / "HumanEval.jsonl.gz"
    mt.write_text(
        "".join(
            json.dumps({"question_id": i, "category": c, "turns": [f"tell {c}", "more"]}) + "\n"
            for i, c in enumerate(prompt_sets.MT_BENCH_CATEGORIES)
        )
    )
    he.write_bytes(
        gzip.compress(json.dumps({"task_id": "HumanEval/0", "prompt": "def f(x):\n", "entry_point": "f"}).encode())
    )
    files = {"mt-bench": mt, "humaneval": he}
    monkeypatch.setattr(prompt_sets, "locate", lambda name: files[name])
    for name, path in files.items():
        monkeypatch.setitem(
            prompt_sets.STANDARD_SETS,
            name,
            dataclasses.replace(prompt_sets.STANDARD_SETS[name], sha256=hashlib.sha256(path.read_bytes()).hexdigest()),
        )
    args = argparse.Namespace(
        prompts="mt-bench,humaneval", num_prompts=2, max_new_tokens=5, seed=0, progress=False, context_edges=[64, 128]
    )
    path = tmp_path / "tiny-r1.json"
    bench_all.bench_round(args, "tiny", "tiny-random", "float32", [("trunc_k2", "truncated:4", 2, None)], path)
    r = json.loads(path.read_text())
    assert r["num_prompts"] == 5 and list(r["methods"]["trunc_k2"]["by_domain"]) == ["writing", "roleplay", "humaneval"]
    assert set(r["cpu"]["flags"] or {"avx512f"}) >= {"avx512f"} and r["cpu"]["model"]
    meta = {k: r.get(k) for k in ("target", "dtype", "device", "hardware", "cpu", "num_prompts", "max_new_tokens")}
    table = bench_all.markdown({"pairs": {"tiny": {"meta": meta, "rounds": 1, "methods": bench_all.aggregate([r])}}})
    assert "τ roleplay" in table and "τ humaneval" in table and "τ turn2" in table and "×) |" in table


def _run(tmp_path, *extra):
    cmd = [
        sys.executable,
        "scripts/bench_all.py",
        "--recipes",
        "configs/tiny",
        "--kinds",
        "eagle3",
        "--minutes",
        "0.05",
        "--pair",
        "none",
        "--num-prompts",
        "1",
        "--max-new-tokens",
        "10",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--out",
        str(tmp_path / "out"),
        "--train-flags=--data.max_rows=150",
        "--compare-data",
        "chitchat",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=900)


def test_bench_all_trains_benches_then_resumes_without_redoing(tiny_cache, tmp_path):
    first = _run(tmp_path, "--repeats", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "runs" / "tiny-eagle3-0.05min"
    assert (run / "final").is_dir() and "[train] eagle3: 0.05 min into" in first.stdout
    assert "max_rows: 150" in (run / "recipe.yaml").read_text()  # --train-flags reach the training
    variant = tmp_path / "runs" / "tiny-eagle3-chitchat-0.05min"  # --compare-data: its own run, without them
    assert (variant / "final").is_dir() and "max_rows: 150" not in (variant / "recipe.yaml").read_text()
    r1 = tmp_path / "out" / "repeats" / "tiny-r1.json"
    stamp = r1.stat().st_mtime_ns

    second = _run(tmp_path, "--repeats", "2")  # one more round: reuse the checkpoint and round 1
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"[train] eagle3: reusing {run}/final" in second.stdout
    assert "[bench] tiny round 1/2" not in second.stdout and "[bench] tiny round 2/2" in second.stdout
    assert r1.stat().st_mtime_ns == stamp
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    res = report["pairs"]["tiny"]
    assert res["rounds"] == 2 and res["methods"]["eagle3_tree16"]["speedup"]["n"] == 2
    assert res["methods"]["eagle3_tree16"]["outputs_match_plain"] is True
    assert res["training"]["eagle3_tree16"].startswith("0.05 min, ")
    assert {"eagle3_k3", "eagle3_tree16", "eagle3_chitchat_k3", "eagle3_chitchat_tree16"} <= set(res["methods"])
    assert "tokens of chitchat" in res["training"]["eagle3_chitchat_tree16"]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| eagle3_tree16 |" in table and "τ chat" in table and "τ code" in table and "τ ctx" in table
    assert (tmp_path / "out" / "per_position_acceptance.png").is_file()

    other = _run(tmp_path, "--repeats", "2", "--max-new-tokens", "12")  # other settings: refuse to mix rounds
    assert other.returncode == 2 and "max_new_tokens: 10 -> 12" in other.stderr and "Traceback" not in other.stderr

    recipe = run / "recipe.yaml"  # a checkpoint trained with another budget is not silently reused
    recipe.write_text(recipe.read_text().replace("max_minutes: 0.05", "max_minutes: 9.0"))
    (tmp_path / "out" / "plan.json").unlink()
    third = _run(tmp_path, "--repeats", "2")
    assert third.returncode == 2 and "was trained differently (optim.max_minutes: 9.0 (wanted 0.05))" in third.stderr
    recipe.write_text(
        recipe.read_text().replace("max_minutes: 9.0", "max_minutes: 0.05").replace("max_rows: 150", "max_rows: 99")
    )
    fourth = _run(tmp_path, "--repeats", "2")  # nor one trained on other data
    assert fourth.returncode == 2 and "data.max_rows: 99 (wanted 150)" in fourth.stderr
