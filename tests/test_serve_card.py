"""The model card shows the served-at-load table only from a serve-bench result of that checkpoint."""

import json

from draftsmith.models import checkpoint_identity
from draftsmith.shipping.hub import build_card
from draftsmith.shipping.serve_card import card_lines, find_serve_bench


def level(c, tokens, base, tau, cat="all", t=0.0):
    return {
        "temperature": t,
        "category": cat,
        "concurrency": c,
        "drafted": {"output_tokens_per_s": tokens, "spec": {"tau": tau}},
        "baseline": {"output_tokens_per_s": base},
        "speedup": {"output_tokens_per_s": tokens / base},
    }


def result(sha):
    return {
        "rows": [level(1, 30.0, 15.0, 2.5), level(4, 50.0, 48.0, 2.4), level(16, 60.0, 70.0, 2.4)],
        "crossover": {"0": {"all": 16}},
        "stamp": {
            "engine": {"name": "vllm", "version": "0.32.0"},
            "machine": {"cpu": "AMD EPYC", "gpus": []},
            "checkpoint": {"sha256": sha},
        },
    }


def test_the_card_shows_the_sweep_of_this_checkpoint_and_its_crossover(tiny, tmp_path):
    _, folder, _ = tiny("eagle3")
    import pathlib
    import shutil

    ckpt = tmp_path / "run" / "final"
    shutil.copytree(pathlib.Path(folder), ckpt)
    assert "## Served at load" not in build_card(ckpt, [])
    (tmp_path / "run" / "serve-bench").mkdir()
    path = tmp_path / "run" / "serve-bench" / "results.json"
    path.write_text(json.dumps(result("not-this-one")))
    assert find_serve_bench(ckpt, checkpoint_identity(ckpt)["sha256"]) is None
    assert "## Served at load" not in build_card(ckpt, [])  # another checkpoint's sweep is not claimed
    path.write_text(json.dumps(result(checkpoint_identity(ckpt)["sha256"])))
    card = build_card(ckpt, [])
    assert "## Served at load" in card and "vllm 0.32.0 on AMD EPYC" in card
    assert "| 0 | all | 1 | 30.0 | 15.0 | 2.00× | 2.50 |" in card
    assert "it stops paying at 16 requests in flight" in card


def test_a_single_category_sweep_and_a_drafter_that_always_pays():
    r = result("x")
    r["rows"] = [level(1, 20.0, 10.0, 3.0, cat="coding"), level(2, 30.0, 20.0, 3.0, cat="coding")]
    r["crossover"] = {"0": {"coding": None}}
    lines = card_lines(r, "serve-bench/results.json")
    assert any("| coding | 2 | 30.0 | 20.0 | 1.50×" in line for line in lines)
    assert lines[-1] == "At temperature 0 (coding): it paid at every level measured."
