"""serve-bench through `vllm bench serve`: which driver a sweep uses and why, the arguments each
level hands vLLM's benchmark, and serve-bench's rows read from vLLM's result JSON. A stand-in
`vllm bench serve` (a script run as the vLLM venv's python) records its arguments and answers with
a result in vLLM's layout; the real one runs in the engines tier (test_serve_bench.py)."""

from __future__ import annotations

import json
import stat
import sys

import pytest
from test_serve_bench import StandIn

from draftsmith.cli import main
from draftsmith.errors import DraftsmithError
from draftsmith.shipping import serve_vllm_bench as vb
from draftsmith.shipping.serve_load import Request

# vLLM 0.32's `vllm bench serve --save-result --save-detailed` JSON, trimmed to what serve-bench reads.
RESULT = {
    "duration": 2.0, "completed": 3, "failed": 1, "total_output_tokens": 30, "request_throughput": 1.5,
    "output_throughput": 15.0, "max_concurrent_requests": 2,
    "mean_ttft_ms": 50.0, "median_ttft_ms": 40.0, "p99_ttft_ms": 99.0,
    "mean_tpot_ms": 20.0, "median_tpot_ms": 21.0, "p99_tpot_ms": 30.0,
    "mean_itl_ms": 60.0, "median_itl_ms": 55.0, "p99_itl_ms": 90.0,
    "ttfts": [0.04, 0.05, 0.06, 0.0], "latencies": [0.2, 0.3, 0.4, 0.0], "output_lens": [10, 10, 10, 0],
    "start_times": [100.0, 100.0, 100.2, 100.5],
    "itls": [[0.05, 0.06], [0.055], [0.06, 0.05, 0.07], []], "errors": ["", "", "", "timeout"],
    "spec_decode_num_drafts": 8, "spec_decode_draft_tokens": 24, "spec_decode_accepted_tokens": 12,
    "spec_decode_acceptance_length": 2.5, "spec_decode_per_position_acceptance_rates": [0.75, 0.5, 0.25],
}  # fmt: skip


def test_a_result_becomes_serve_benchs_row_with_vllms_own_figures():
    row, records, spec = vb.read_result(json.loads(json.dumps(RESULT)))
    assert row["driver"] == "vllm bench serve"
    assert (row["requests"], row["failed"], row["output_tokens"], row["wall_s"]) == (3, 1, 30, 2.0)
    assert (row["output_tokens_per_s"], row["requests_per_s"]) == (15.0, 1.5)
    # the third starts as the first ends: two in flight at most, whatever vLLM's per-second count says
    assert (row["max_concurrency_seen"], row["vllm_max_concurrent_requests"]) == (2, 2)
    assert vb.peak_in_flight([0.0, 0.5, 0.6, 2.0], [1.0, 1.0, 0.1, 1.0]) == 3
    assert vb.peak_in_flight([0.0, 1.0], [1.0, 1.0]) == 1 and vb.peak_in_flight([], []) is None
    assert (row["median_ttft_ms"], row["p99_tpot_ms"], row["median_itl_ms"]) == (40.0, 30.0, 55.0)
    assert row["ttft_p50_s"] == pytest.approx(0.040) and row["itl_p99_s"] == pytest.approx(0.030)  # the old keys
    assert [r.error for r in records] == [None, None, None, "timeout"]
    assert records[2].gaps == [0.06, 0.05, 0.07] and records[0].e2e == 0.2 and records[1].tokens == 10
    fig = spec.figures()
    assert fig["mean_acceptance_length"] == pytest.approx(2.5)  # vLLM's acceptance length, the bonus counted
    assert fig["per_position"] == pytest.approx([0.75, 0.5, 0.25])
    plain = {k: v for k, v in RESULT.items() if not k.startswith("spec_decode")}
    assert vb.read_result(plain)[2] is None
    empty = dict(plain, completed=0, ttfts=[], latencies=[], output_lens=[], itls=[], errors=[])
    assert vb.read_result(empty)[0]["median_ttft_ms"] is None  # vLLM's zeros where nothing finished


def test_the_driver_is_vllms_where_it_runs_and_says_why_where_not(monkeypatch, tmp_path):
    one = {"qa": [Request("qa", [{"role": "user", "content": "hi"}])]}
    two = {"qa": [Request("qa", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])]}
    assert "cannot run" in vb.bench_serve_problem(str(tmp_path / "no-python"))
    problems = {"/venv/bin/python": None, "/other/python": "/other/python cannot import vllm.benchmarks.serve"}
    monkeypatch.setattr(vb, "bench_serve_problem", problems.get)
    assert vb.choose("auto", "/venv/bin/python", one, "chat")[0] == "vllm"
    assert vb.choose("draftsmith", "/venv/bin/python", one, "chat") == ("draftsmith", "asked for")
    name, why = vb.choose("auto", None, one, "chat")
    assert name == "draftsmith" and "no vLLM is installed" in why
    name, why = vb.choose("auto", "/other/python", one, "chat")
    assert name == "draftsmith" and "cannot import vllm.benchmarks.serve" in why
    name, why = vb.choose("auto", "/venv/bin/python", two, "chat")
    assert name == "draftsmith" and "category qa" in why and "more than one user message" in why
    assert vb.choose("auto", "/venv/bin/python", two, "completions")[0] == "vllm"  # one joined prompt
    with pytest.raises(DraftsmithError, match="--driver vllm: no vLLM is installed"):
        vb.choose("vllm", None, one, "chat")
    with pytest.raises(DraftsmithError, match="--driver fast: one of auto, vllm, draftsmith"):
        vb.choose("fast", None, one, "chat")


def test_a_levels_arguments_hold_its_load_sampling_and_prompts(tmp_path):
    argv = vb.arguments("http://h:8000/v1", "target", "/models/t", tmp_path / "d.jsonl", tmp_path / "r.json", 12, 4,
                        api="chat", max_tokens=64, temperature=1.0, seed=7, ignore_eos=True, warmup=2,
                        template_kwargs={"enable_thinking": False})  # fmt: skip

    def value(flag):
        return argv[argv.index(flag) + 1]

    assert value("--base-url") == "http://h:8000" and value("--endpoint") == "/v1/chat/completions"
    assert value("--backend") == "openai-chat" and value("--tokenizer") == "/models/t"
    assert (value("--max-concurrency"), value("--num-prompts"), value("--request-rate")) == ("4", "12", "inf")
    assert (value("--temperature"), value("--custom-output-len"), value("--num-warmups")) == ("1.0", "64", "2")
    assert json.loads(value("--extra-body")) == {"seed": 7, "chat_template_kwargs": {"enable_thinking": False}}
    assert "--skip-chat-template" in argv and "--ignore-eos" in argv and "--save-detailed" in argv
    argv = vb.arguments("http://h:8000", "m", "m", tmp_path / "d", tmp_path / "r.json", 1, 1, api="completions",
                        max_tokens=8, temperature=0.0, seed=0, ignore_eos=False, warmup=0,
                        template_kwargs=None)  # fmt: skip
    assert value("--backend") == "openai" and value("--endpoint") == "/v1/completions"
    assert "--ignore-eos" not in argv and json.loads(value("--extra-body")) == {"seed": 0}


# A stand-in for the vLLM venv's python: the import probe succeeds; the benchmark records its
# arguments and the prompts it was given, and answers with RESULT, drafted figures only where the
# server's /metrics carries spec-decode counters (as vLLM's benchmark does).
FAKE = r"""
import json, pathlib, sys, urllib.request
argv = sys.argv[1:]
if "import pandas" in argv[argv.index("-c") + 1] and len(argv) == 3:
    sys.exit(0)
args = argv[argv.index("-c") + 2:]
value = lambda flag: args[args.index(flag) + 1]
log = pathlib.Path(sys.argv[0]).with_name("calls.jsonl")
prompts = [json.loads(line)["prompt"] for line in open(value("--dataset-path"))]
with open(log, "a") as f:
    f.write(json.dumps({"args": args, "prompts": prompts}) + "\n")
result = json.loads(pathlib.Path(sys.argv[0]).with_name("result.json").read_text())
metrics = urllib.request.urlopen(value("--base-url") + "/metrics").read().decode()
if "spec_decode" not in metrics:
    result = {k: v for k, v in result.items() if not k.startswith("spec_decode")}
out = pathlib.Path(value("--result-dir")) / value("--result-filename")
out.write_text(json.dumps(result))
"""


@pytest.fixture
def fake_vllm(tmp_path):
    folder = tmp_path / "venv" / "bin"
    folder.mkdir(parents=True)
    (folder / "fake.py").write_text(FAKE)
    three = {k: v[:3] if isinstance(v, list) and k != "spec_decode_per_position_acceptance_rates" else v
             for k, v in RESULT.items()}  # fmt: skip
    (folder / "result.json").write_text(json.dumps(dict(three, failed=0)))
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {folder / "fake.py"} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    vb.bench_serve_problem.cache_clear()
    yield python
    vb.bench_serve_problem.cache_clear()


def test_serve_bench_runs_each_level_through_vllm_bench_serve(fake_vllm, tmp_path, capsys, monkeypatch):
    from draftsmith.shipping import installs

    drafted, plain = StandIn(drafted=True), StandIn(drafted=False)
    monkeypatch.setattr(installs, "probe", lambda python: {"vllm": True, "version": "0.32.0", "prefix": None})
    speed = tmp_path / "speed.jsonl"
    speed.write_text("".join(json.dumps({"category": c, "turns": [f"{c} q{i}"]}) + "\n" for i, c in
                             enumerate(["qa", "coding"] * 2)))  # fmt: skip
    out = tmp_path / "sb"
    try:
        rc = main(["serve-bench", "--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", str(speed),
                   "--concurrency", "1,2", "--num-requests", "3", "--warmup", "1", "--temperature", "0.7",
                   "--vllm", str(fake_vllm), "--tokenizer", "/models/t", "--output-dir", str(out)])  # fmt: skip
    finally:
        drafted.close()
        plain.close()
    err = capsys.readouterr().err
    assert rc == 0, err
    assert drafted.bodies == [] and plain.bodies == []  # every request was vLLM's benchmark's
    calls = [json.loads(line) for line in (fake_vllm.parent / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 2 * 2 * 2  # servers x levels x categories
    for call in calls:
        args = call["args"]
        assert args[args.index("--temperature") + 1] == "0.7" and args[args.index("--num-prompts") + 1] == "3"
        assert len(call["prompts"]) == 3 and all(p.split()[0] in ("qa", "coding") for p in call["prompts"])
    warmups = [c["args"][c["args"].index("--num-warmups") + 1] for c in calls]
    assert warmups == ["1", "0"] * 4  # once per level, before its first category
    result = json.loads((out / "results.json").read_text())
    assert result["stamp"]["driver"]["name"] == "vllm bench serve"
    rows = {(r["category"], r["concurrency"]): r for r in result["rows"]}
    assert set(rows) == {(c, n) for c in ("qa", "coding", "all") for n in (1, 2)}
    qa = rows[("qa", 2)]
    assert qa["drafted"]["driver"] == "vllm bench serve" and qa["drafted"]["median_ttft_ms"] == 40.0
    assert qa["drafted"]["spec"]["mean_acceptance_length"] == pytest.approx(2.5)
    assert "spec" not in qa["baseline"] and qa["speedup"]["output_tokens_per_s"] == pytest.approx(1.0)
    pooled = rows[("all", 1)]["drafted"]
    assert pooled["requests"] == 6 and pooled["spec"]["drafts"] == 16  # both categories' requests and drafts
    assert (out / "vllm-bench" / "drafted-T0.7-c2-qa.json").is_file()


def test_driver_vllm_without_a_vllm_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path / "no-engines"))
    monkeypatch.delenv("DRAFTSMITH_VLLM", raising=False)
    drafted, plain = StandIn(drafted=True), StandIn(drafted=False)
    try:
        rc = main(["serve-bench", "--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", "chat",
                   "--num-prompts", "1", "--concurrency", "1", "--num-requests", "1", "--driver", "vllm",
                   "--output-dir", str(tmp_path / "sb")])  # fmt: skip
    finally:
        drafted.close()
        plain.close()
    err = capsys.readouterr().err
    assert rc == 2 and "vllm is not installed" in err and len(err.strip().splitlines()) == 1, err
    assert drafted.bodies == []


def test_auto_falls_back_to_our_driver_where_vllm_bench_serve_cannot_run(fake_vllm, tmp_path, capsys, monkeypatch):
    from draftsmith.shipping import installs

    (fake_vllm.parent / "fake.py").write_text(  # the probe passes; the benchmark itself fails
        "import sys\nargv = sys.argv[1:]\nsys.exit(0 if len(argv) == 3 else 'OSError: no tokenizer at target')\n"
    )
    monkeypatch.setattr(installs, "probe", lambda python: {"vllm": True, "version": "0.32.0", "prefix": None})
    drafted, plain = StandIn(drafted=True), StandIn(drafted=False)
    out = tmp_path / "sb"
    base = ["serve-bench", "--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", "chat",
            "--num-prompts", "1", "--concurrency", "1", "--num-requests", "1", "--warmup", "0",
            "--vllm", str(fake_vllm), "--output-dir", str(out)]  # fmt: skip
    try:
        rc = main(base)
        err = capsys.readouterr().err
        assert rc == 0, err
        result = json.loads((out / "results.json").read_text())
        assert result["stamp"]["driver"]["name"].startswith("draftsmith serve-bench")
        assert "vllm bench serve failed" in result["stamp"]["driver"]["why"]
        assert {r["drafted"]["driver"] for r in result["rows"]} == {"draftsmith"}
        assert len(drafted.bodies) == 1 and len(plain.bodies) == 1  # one request each, ours
        rc = main([*base, "--driver", "vllm"])  # asked for: the failure is the answer
        err = capsys.readouterr().err
        assert rc == 2 and "vllm bench serve failed (exit 1)" in err and len(err.strip().splitlines()) == 1, err
    finally:
        drafted.close()
        plain.close()
