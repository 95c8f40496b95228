"""draftsmith/evaluation/benchkit.py: the benchmark scripts' shared flags, tables and JSON."""

import json
import subprocess
import sys

import pytest

from draftsmith.evaluation import benchkit


def test_shared_flags_keep_each_script_s_defaults_and_spelling():
    p = benchkit.parser(
        "Title line.\n\nMore text.",
        target="t",
        drafts={},
        num_speculative_tokens=3,
        prompts={"default": "chat", "help": "own help"},
        json=None,
    )
    assert p.description == "Title line." and "own help" in p.format_help()
    args = p.parse_args(["--draft", "a", "--draft", "b", "--num-speculative-tokens", "5"])
    assert args.draft == ["a", "b"] and args.num_speculative_tokens == 5 and args.target == "t"
    assert args.prompts == "chat" and args.json is None
    with pytest.raises(SystemExit):  # --draft is required where the script compares several
        p.parse_args([])
    with pytest.raises(KeyError, match="no shared flag 'bogus'"):
        benchkit.parser("x", bogus=1)


def test_k_alone_and_its_long_form_are_different_flags():
    short = benchkit.parser("x", k=4).parse_args(["-k", "2"])
    long = benchkit.parser("x", num_speculative_tokens=4).parse_args(["--num-speculative-tokens", "2"])
    assert short.k == 2 and long.num_speculative_tokens == 2
    with pytest.raises(SystemExit):
        benchkit.parser("x", k=4).parse_args(["--num-speculative-tokens", "2"])


def test_markdown_table_prints_none_as_a_dash():
    table = benchkit.markdown_table(["a", "b", "c"], [["x", 1.5, None], ["y", "", 2]])
    assert table.splitlines() == ["| a | b | c |", "|---|---|---|", "| x | 1.5 | - |", "| y |  | 2 |"]


def test_save_stamps_or_not_and_says_where(tmp_path, capsys):
    assert benchkit.save({"a": 1}, None) is None and capsys.readouterr().out == ""
    stamped = tmp_path / "sub" / "r.json"
    benchkit.save({"a": 1}, stamped, argv=["bench.py"])
    assert capsys.readouterr().out == f"wrote {stamped}\n"
    on_disk = json.loads(stamped.read_text())
    assert on_disk["a"] == 1 and on_disk["command"] == "bench.py" and "machine" in on_disk
    plain = tmp_path / "plain.json"
    benchkit.save({"a": 1}, plain, stamp=False, quiet=True)
    assert json.loads(plain.read_text()) == {"a": 1} and capsys.readouterr().out == ""
    # no temporary file left beside them
    assert {p.name for p in tmp_path.iterdir()} == {"sub", "plain.json"}
    assert [p.name for p in stamped.parent.iterdir()] == ["r.json"]


def test_comparison_pools_acceptance_and_checks_outputs():
    from draftsmith.infer.engine import GenerationResult
    from draftsmith.infer.metrics import SpecMetrics

    def result(tokens, seconds, accepted=0, drafts=0):
        return GenerationResult(tokens, [], "", SpecMetrics(drafts=drafts, accepted_tokens=accepted), seconds, 0, 3)

    outputs = {
        "plain": [result([1, 2], 1.0), result([3, 4, 5, 6], 2.0)],
        "spec": [result([1, 2], 0.5, 1, 1), result([3, 4, 5, 7], 1.0, 3, 2)],
    }
    summary = benchkit.comparison(outputs)
    assert summary["plain"]["tokens_per_s"] == pytest.approx(2.0) and summary["spec"]["tokens_per_s"] == 4.0
    assert summary["plain"]["outputs_match"] is True and summary["spec"]["outputs_match"] is False
    assert summary["spec"]["metrics"].drafts == 3 and summary["spec"]["metrics"].accepted_tokens == 4


def test_capped_k_follows_the_drafter_s_limit():
    from draftsmith.infer.proposal import Drafter

    class Block(Drafter):
        max_speculative_tokens = 3

    assert benchkit.capped_k(Block(), 8) == 3 and benchkit.capped_k(Drafter(), 8) == 8


def test_importing_it_loads_no_torch():
    code = "import sys, draftsmith.evaluation.benchkit; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
