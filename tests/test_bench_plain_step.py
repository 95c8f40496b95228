"""scripts/bench_plain_step.py on the tiny target: every registered kind, a plain step inside the
speculative engine timed beside the plain engine's, a table and a stamped JSON (figures are the
script's business; the test checks what it measured, not how fast)."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_kind_is_timed_beside_the_plain_engine(tiny_cache, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_plain_step import main
    finally:
        sys.path.pop(0)
    from draftsmith.kinds import KINDS

    out = tmp_path / "plain_step.json"
    argv = ["--target", "tiny-random", "--max-new-tokens", "6", "--repeats", "1", "--json", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert [r["kind"] for r in result["kinds"]] == list(KINDS)
    for r in result["kinds"]:
        assert r["steps_timed"] >= 4  # 6 tokens: 5 steps a run, the first (drafted) one left out
        assert r["plain_engine_step_ms"] > 0 and r["speculative_engine_plain_step_ms"] > 0
        assert r["ratio"] == pytest.approx(r["speculative_engine_plain_step_ms"] / r["plain_engine_step_ms"])
    assert result["max_ratio"] == max(r["ratio"] for r in result["kinds"])
    table = capsys.readouterr().out
    assert all(f"| {name} |" in table for name in KINDS)


def test_an_unknown_kind_is_one_line(tiny_cache, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_plain_step import main
    finally:
        sys.path.pop(0)
    from draftsmith.errors import DraftsmithError

    with pytest.raises(DraftsmithError, match="unknown kind.*nope"):
        main(["--target", "tiny-random", "--kinds", "nope"])
