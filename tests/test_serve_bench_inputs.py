"""`draftsmith serve-bench` on inputs and servers that go wrong: a cut-off stream is a failed
request, not a short answer; bad values are refused in one line before any request is sent; a
server that loses or restarts its counters mid-sweep keeps the levels that finished; Ctrl-C stops
the requests in flight at once; the figures carry vLLM's names and units."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time

import pytest
from test_serve_bench import PER_REQUEST, TOKENS, StandIn

from draftsmith.cli import main
from draftsmith.shipping import serve_card, serve_load


@pytest.fixture
def speed_file(tmp_path):
    path = tmp_path / "speed.jsonl"
    rows = [{"category": c, "turns": [f"{c} question {i}"]} for i, c in enumerate(["qa", "coding"] * 3)]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    return path


@pytest.fixture
def make():
    made = []

    def _make(**kw):
        s = StandIn(**kw)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.close()


def _run(argv, capsys):
    """serve-bench with its own driver unless the test names one (these stand-ins speak HTTP only;
    `vllm bench serve` has its own tests in test_serve_vllm_bench.py)."""
    argv = [*argv, *([] if "--driver" in map(str, argv) else ["--driver", "draftsmith"])]
    rc = main(["serve-bench", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line(rc, err, message, status=2):
    assert rc == status and message in err and len(err.strip().splitlines()) == 1, (rc, err)


def test_a_cut_off_stream_is_a_failed_request_and_its_level_no_speedup(make, speed_file, tmp_path, capsys, caplog):
    drafted, plain = make(drafted=True), make(drafted=False, cut_after=2, cut_every=2)
    out = tmp_path / "sb"
    argv = ["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file, "--categories", "qa"]
    argv += ["--concurrency", 1, "--num-requests", 4, "--warmup", 0, "--max-tokens", 16, "--output-dir", out]
    with caplog.at_level(logging.WARNING):
        rc, stdout, err = _run(argv, capsys)
    assert rc == 0, err
    rows = json.loads((out / "results.json").read_text())["rows"]
    for r in rows:
        b = r["baseline"]
        assert (b["failed"], b["requests"], b["output_tokens"]) == (2, 2, 2 * TOKENS)  # every other one cut
        assert r["valid"] is False and "failed requests" in r["note"]
        assert all(v is None for v in r["speedup"].values())  # no speedup over failed requests
    assert "ended before [DONE]" in caplog.text and "2 of 4 requests failed" in caplog.text
    assert "0/2" in stdout and "failed requests" in stdout
    # every request cut off: one line, not a table
    cut = make(drafted=False, cut_after=2)
    rc, _, err = _run([*argv[:3], cut.url, *argv[4:]], capsys)
    _one_line(rc, err, "every request failed, e.g. the stream ended before [DONE] after 2 chunks")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--temperature", "nan"], "--temperature nan: must be finite"),
        (["--temperature", "0,inf"], "--temperature 0,inf: must be finite"),
        (["--temperature", "1e400"], "--temperature 1e400: must be finite"),
        (["--request-timeout", "0"], "--request-timeout 0: must be a number of seconds > 0"),
        (["--request-timeout", "-5"], "--request-timeout -5: must be a number of seconds > 0"),
        (["--long-context", "-5"], "--long-context must be >= 0"),
        (["--concurrency", "1,8", "--num-requests", "4"], "--num-requests 4 cannot fill 8 requests in flight"),
    ],
)
def test_bad_values_are_one_line_before_any_request(make, speed_file, tmp_path, capsys, extra, message):
    drafted, plain = make(drafted=True), make(drafted=False)
    argv = ["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file]
    rc, _, err = _run([*argv, "--output-dir", tmp_path / "o", *extra], capsys)
    _one_line(rc, err, message)
    assert drafted.bodies == [] and plain.bodies == []


def test_bad_servers_and_output_folders_are_one_line_before_any_request(make, speed_file, tmp_path, capsys):
    drafted, plain = make(drafted=True), make(drafted=False)
    common = ["--prompts", speed_file, "--concurrency", 1, "--num-requests", 1]
    rc, _, err = _run(["--base-url", "http://127.0.0.1:70000/v1", "--baseline-url", plain.url, *common], capsys)
    _one_line(rc, err, "--base-url http://127.0.0.1:70000: the port must be a number from 1 to 65535")
    same = drafted.url.removesuffix("/v1") + "/"  # the same server written another way
    rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", same, *common], capsys)
    _one_line(rc, err, "--base-url and --baseline-url are the same server")
    both = ["--base-url", drafted.url, "--baseline-url", plain.url, *common]
    shadow = tmp_path / "a-file"
    shadow.write_text("")
    rc, _, err = _run([*both, "--output-dir", shadow], capsys)
    _one_line(rc, err, "is a file, not a folder")
    rc, _, err = _run([*both, "--output-dir", shadow / "below"], capsys)
    _one_line(rc, err, "is a file, not a folder")
    assert drafted.bodies == [] and plain.bodies == []


def test_a_read_only_output_dir_is_refused_before_any_request(make, speed_file, tmp_path, capsys):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes in a read-only folder")
    drafted, plain = make(drafted=True), make(drafted=False)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                           "--concurrency", 1, "--num-requests", 1, "--output-dir", ro / "sb"], capsys)  # fmt: skip
    finally:
        ro.chmod(0o755)
    _one_line(rc, err, "not writable")
    assert drafted.bodies == []


def test_counters_that_leave_mid_sweep_are_one_line_and_the_finished_levels_are_kept(
    make, speed_file, tmp_path, capsys
):
    drafted, plain = make(drafted=True, drop_counters_after=3), make(drafted=False)
    out = tmp_path / "sb"
    rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                       "--categories", "qa", "--concurrency", "1,2", "--num-requests", 2, "--warmup", 0,
                       "--output-dir", out], capsys)  # fmt: skip
    _one_line(rc, err, "the spec_decode counters left /metrics during the sweep (T=0, 2 in flight, qa)")
    assert "the levels that finished are in" in err
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] is False and result["rows"] == []
    kept = {(u["server"], u["category"], u["concurrency"]) for u in result["unpaired"]}
    assert kept == {("drafted", "qa", 1), ("drafted", "all", 1)}


def test_counters_that_go_backwards_are_named_and_that_acceptance_not_reported(
    make, speed_file, tmp_path, capsys, caplog
):
    drafted, plain = make(drafted=True, restart_at=6), make(drafted=False)  # restarts during coding's requests
    out = tmp_path / "sb"
    with caplog.at_level(logging.WARNING):
        rc, stdout, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                                "--concurrency", 1, "--num-requests", 4, "--warmup", 0, "--output-dir", out],
                               capsys)  # fmt: skip
    assert rc == 0, err
    assert "went backwards during T=0, 1 in flight, coding (the server restarted?)" in caplog.text
    spec = {r["category"]: r["drafted"]["spec"] for r in json.loads((out / "results.json").read_text())["rows"]}
    assert spec["qa"]["valid"] and spec["qa"]["mean_acceptance_length"] == pytest.approx(3.0)
    for cat in ("coding", "all"):
        assert spec[cat]["valid"] is False and spec[cat]["mean_acceptance_length"] is None
    assert "invalid" in stdout


def test_ctrl_c_stops_a_hung_request_at_once_and_keeps_what_finished(make, speed_file, tmp_path, capsys):
    drafted, plain = make(drafted=True), make(drafted=False, hang=True)
    out = tmp_path / "sb"
    main_thread = threading.main_thread().ident

    def press_ctrl_c():
        if plain.hanging.wait(timeout=300):
            signal.pthread_kill(main_thread, signal.SIGINT)

    # Python's own Ctrl-C handler for the run: a shell that starts the suite in the background
    # (`cmd &`, nohup) leaves SIGINT ignored, and the press would never arrive.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=press_ctrl_c, daemon=True).start()
    t0 = time.monotonic()
    try:
        rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                           "--categories", "qa", "--concurrency", 1, "--num-requests", 2, "--warmup", 0,
                           "--request-timeout", 600, "--output-dir", out], capsys)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, old)
    assert time.monotonic() - t0 < 300  # not the 600 s request timeout
    _one_line(rc, err, "interrupted: the levels that finished are in", status=130)
    assert "rerun" not in err and "resume" not in err
    result = json.loads((out / "results.json").read_text())
    assert result["complete"] is False and result["stopped"] == "interrupted (Ctrl-C)"
    assert {(u["server"], u["category"]) for u in result["unpaired"]} == {("drafted", "qa"), ("drafted", "all")}


def test_the_most_requests_in_flight_are_recorded(make, speed_file, tmp_path, capsys):
    # each request waits until three are in flight: the peak is exactly three
    drafted = make(drafted=True, gate=threading.Barrier(3))
    plain = make(drafted=False, gate=threading.Barrier(3))
    out = tmp_path / "sb"
    rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                       "--categories", "qa", "--concurrency", 3, "--num-requests", 3, "--warmup", 0,
                       "--output-dir", out], capsys)  # fmt: skip
    assert rc == 0, err
    for r in json.loads((out / "results.json").read_text())["rows"]:
        assert r["drafted"]["max_concurrency_seen"] == 3 and r["baseline"]["max_concurrency_seen"] == 3


def test_figures_carry_vllms_names_in_milliseconds():
    # two requests: 5 one-token chunks 100 ms apart; 9 tokens (usage) in 3 chunks 200 ms apart
    records = [
        serve_load.Record(ttft=0.1, e2e=0.5, tokens=5, gaps=[0.1] * 4),
        serve_load.Record(ttft=0.1, e2e=0.5, tokens=9, gaps=[0.2, 0.2]),
        serve_load.Record(ttft=None, e2e=0.3, tokens=0, error="the stream ended before [DONE] after 2 chunks"),
    ]
    f = serve_load.level_figures(records, 1.0, 2)
    assert (f["requests"], f["failed"], f["max_concurrency_seen"]) == (2, 1, 2)
    assert f["median_ttft_ms"] == pytest.approx(100.0)
    assert f["mean_tpot_ms"] == pytest.approx((100.0 + 50.0) / 2)  # (e2e - ttft) / (tokens - 1)
    assert f["p99_itl_ms"] == pytest.approx(200.0) and f["median_itl_ms"] == pytest.approx(100.0)  # chunk gaps
    assert f["mean_itl_ms"] == pytest.approx(800.0 / 6)
    assert f["itl_p50_s"] == pytest.approx(f["median_tpot_ms"] / 1e3)  # the old key: seconds, what tpot is now
    spec = serve_load.SpecCounters(10, 30, 20, {0: 9}).figures()
    assert spec["mean_acceptance_length"] == spec["tau"] == pytest.approx(3.0)


def test_a_stream_records_the_gap_between_each_pair_of_chunks(make):
    s = make(drafted=False)
    req = serve_load.Request("qa", [{"role": "user", "content": "hi"}])
    r = serve_load.stream(s.url, "stand-in", req, api="chat", max_tokens=16, temperature=0.0, seed=0)
    assert r.error is None and r.tokens == TOKENS and len(r.gaps) == TOKENS - 1


def test_the_card_reads_the_new_and_the_old_acceptance_key():
    def result(spec):
        row = {"temperature": 0.0, "category": "all", "concurrency": 1}
        row["drafted"] = {"output_tokens_per_s": 20.0, "spec": spec}
        row["baseline"], row["speedup"] = {"output_tokens_per_s": 10.0}, {"output_tokens_per_s": 2.0}
        return {"rows": [row], "crossover": {}, "stamp": {}}

    tau = 1 + PER_REQUEST["accepted"] / PER_REQUEST["drafts"]
    for spec in ({"mean_acceptance_length": tau}, {"tau": tau}):
        assert any("| 2.00× | 3.00 |" in line for line in serve_card.card_lines(result(spec), "x"))
