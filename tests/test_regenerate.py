"""Regeneration (train/data/regeneration.py): the target rewrites the assistant turns, in-process (batch-1
engine, batched generate) or through an OpenAI-compatible endpoint (a stand-in server on
127.0.0.1 here), into one resumable cache."""

import copy
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine
from draftsmith.models.sources import load_tokenizer
from draftsmith.train.config import DataConfig, recipe_from_dict
from draftsmith.train.data import build_data, endpoint_client
from draftsmith.train.data import regeneration as regen_mod
from draftsmith.train.data.regeneration import cache_path, regenerate


@pytest.fixture(scope="module")
def tok(tiny_cache):
    return load_tokenizer("tiny-random")


def chat(i: int, turns: int = 2, words: int = 1) -> list[dict]:
    msgs = []
    for t in range(turns):
        msgs += [
            {"role": "user", "content": f"question {i}.{t}: " + "what now? " * words},
            {"role": "assistant", "content": f"answer {i}.{t}: this."},
        ]
    return msgs


def write_jsonl(path, chats) -> str:
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    return str(path)


def rows_of(chats) -> list[dict]:
    return [{"index": i, "messages": c} for i, c in enumerate(chats)]


def cached_lines(cfg: DataConfig, target=None) -> list[dict]:
    return [json.loads(line) for line in cache_path(cfg, target).read_text().splitlines()]


# --- A stand-in OpenAI-compatible server ----------------------------------------------------------


def reply_for(messages: list[dict]) -> str:
    """What the stand-in answers: a function of the whole history (so a second turn shows
    whether the history carried the first regenerated reply)."""
    return f"R{len(messages)}<{messages[-1]['content'][:24]}>"


class StandIn:
    """`vllm serve`'s /v1/chat/completions, as far as regeneration uses it. `plan(n)` decides the
    n-th request's fate (0-based): None (answer), an HTTP status, or "slow" (sleep past a timeout).
    `content(messages)` is the reply's choices[0].message.content (vLLM answers null for a reply that
    is all reasoning under a reasoning parser, or a tool call)."""

    def __init__(self, model: str = "served-model", delay: float = 0.0):
        self.model, self.delay = model, delay
        self.models_route, self.max_model_len = False, None  # GET /v1/models, as vLLM lists its model
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        self.api_key, self.authorizations = None, []  # `vllm serve --api-key KEY`: 401 without "Bearer KEY"
        self.plan = lambda n: None
        self.content = lambda messages: " " + reply_for(messages) + "\n"
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def refused(self) -> bool:
                """vLLM's answer to a request without the server's key (its {"error": "Unauthorized"})."""
                stand_in.authorizations.append(self.headers.get("Authorization"))
                if stand_in.api_key is None or self.headers.get("Authorization") == f"Bearer {stand_in.api_key}":
                    return False
                self.answer(401, {"error": "Unauthorized"})
                return True

            def do_GET(self):
                if not stand_in.models_route or self.path != "/v1/models":
                    return self.answer(404, {"object": "error", "message": f"Not Found: {self.path}"})
                if self.refused():
                    return
                self.answer(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": stand_in.model, "object": "model", "max_model_len": stand_in.max_model_len}],
                    },
                )

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.refused():
                    return
                with stand_in.lock:
                    n = len(stand_in.requests)
                    stand_in.requests.append((self.path, body))
                    stand_in.in_flight += 1
                    stand_in.max_in_flight = max(stand_in.max_in_flight, stand_in.in_flight)
                try:
                    fate = stand_in.plan(n)
                    time.sleep(1.0 if fate == "slow" else stand_in.delay)
                    if self.path != "/v1/chat/completions":
                        self.answer(404, {"object": "error", "message": f"Not Found: {self.path}"})
                    elif body["model"] != stand_in.model:
                        self.answer(
                            404,
                            {
                                "object": "error",
                                "message": f"The model `{body['model']}` does not exist.",
                                "type": "NotFoundError",
                                "code": 404,
                            },
                        )
                    elif isinstance(fate, int):
                        self.answer(fate, {"object": "error", "message": "engine overloaded"})
                    else:
                        content = stand_in.content(body["messages"])
                        text = content.strip() if isinstance(content, str) else ""
                        self.answer(
                            200,
                            {
                                "id": f"chatcmpl-{n}",
                                "object": "chat.completion",
                                "model": stand_in.model,
                                "choices": [
                                    {
                                        "index": 0,
                                        "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content},
                                    }
                                ],
                                "usage": {
                                    "prompt_tokens": 9,
                                    "completion_tokens": len(text),
                                    "total_tokens": 9 + len(text),
                                },
                            },
                        )
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass
                finally:
                    with stand_in.lock:
                        stand_in.in_flight -= 1

            def answer(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    s = StandIn(delay=0.02)
    yield s
    s.close()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(endpoint_client, "BACKOFF_S", 0.01)


def endpoint_cfg(url: str, tmp_path, **kw) -> DataConfig:
    kw = {
        "regenerate": True,
        "regenerate_with": "endpoint",
        "regenerate_endpoint": url,
        "regenerate_model": "served-model",
        "regenerate_concurrency": 4,
        "regenerate_retries": 2,
        "regenerate_timeout_s": 5.0,
        **kw,
    }
    return DataConfig(path=str(tmp_path / "chats.jsonl"), **kw)


def assert_regenerated_by_stand_in(original: list[dict], messages: list[dict]) -> None:
    """User turns kept; every assistant turn is the stand-in's answer to the regenerated history."""
    assert [m["role"] for m in messages] == [m["role"] for m in original]
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            assert m["content"] == reply_for(messages[:i])
        else:
            assert m["content"] == original[i]["content"]


# --- The endpoint -----------------------------------------------------------------------------------


def test_endpoint_regenerates_chats_in_parallel(server, tmp_path, tok):
    chats = [chat(i, turns=1 + i % 3) for i in range(12)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_max_new_tokens=33, regenerate_temperature=0.7)
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert server.max_in_flight > 1  # the server saw overlapping requests
    assert len(server.requests) == sum(1 + i % 3 for i in range(12))  # one request per assistant turn
    for path, body in server.requests:
        assert path == "/v1/chat/completions" and body["model"] == "served-model"
        assert body["max_tokens"] == 33 and body["temperature"] == 0.7 and body["messages"][-1]["role"] == "user"
    # A second turn was asked with the first *regenerated* reply in its history.
    assert any(
        body["messages"][1]["content"].startswith("R1<") for _, body in server.requests if len(body["messages"]) > 2
    )
    for chat_in, row in zip(chats, out):
        assert_regenerated_by_stand_in(chat_in, row["messages"])
    lines = cached_lines(c)
    assert sorted(e["index"] for e in lines) == list(range(12))
    assert counts["regenerated_rows"] == 12 and counts["regenerated_from_cache"] == 0


def test_endpoint_through_build_data_needs_no_target(server, tmp_path, tok):
    chats = [chat(i) for i in range(6)]
    write_jsonl(tmp_path / "chats.jsonl", chats)
    data = build_data(endpoint_cfg(server.url, tmp_path, pack=False), tok, target=None, progress=False)
    assert data.stats["regenerated_rows"] == 6 and len(server.requests) == 12
    texts = [tok.decode(item["input_ids"][item["attention_mask"].bool()]) for item in [*data.train, *data.eval]]
    assert all("R1<question" in t and "answer" not in t for t in texts)


def test_a_kill_mid_run_resumes_without_duplicates_or_losses(server, tmp_path, tok):
    chats = [chat(i, turns=2) for i in range(10)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_concurrency=3)
    server.plan = lambda n: 500 if n >= 9 else None  # the server dies after 9 answers
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of(chats), c, tok, None, progress=False)
    msg = str(e.value)
    assert server.url + "/chat/completions" in msg and "HTTP 500" in msg and "after 3 tries" in msg and "\n" not in msg
    first = [entry["index"] for entry in cached_lines(c)]
    assert 1 <= len(first) <= 4 and len(set(first)) == len(first)  # the finished chats were kept
    server.plan, before = (lambda n: None), len(server.requests)
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert len(server.requests) - before == 2 * (10 - len(first))  # only the missing chats were asked for
    lines = cached_lines(c)
    assert sorted(entry["index"] for entry in lines) == list(range(10))  # each chat exactly once
    assert counts["regenerated_from_cache"] == len(first)
    for chat_in, row in zip(chats, out):
        assert_regenerated_by_stand_in(chat_in, row["messages"])


def test_an_interrupt_keeps_every_finished_chat(server, tmp_path, tok, monkeypatch):
    """A Ctrl-C (or any exception) in the writing loop: what finished is on disk; a rerun completes."""
    chats = [chat(i, turns=1) for i in range(8)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_concurrency=2)
    real, finished = regen_mod._Progress.update, []

    def interrupt(self, rows, tokens):
        real(self, rows, tokens)
        finished.append(rows)
        if len(finished) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(regen_mod._Progress, "update", interrupt)
    with pytest.raises(KeyboardInterrupt):
        regenerate(rows_of(chats), c, tok, None, progress=False)
    first = [entry["index"] for entry in cached_lines(c)]
    assert len(first) >= 3 and len(set(first)) == len(first)
    assert len(server.requests) == len(first)  # in-flight chats were finished and kept; nothing new was sent
    monkeypatch.setattr(regen_mod._Progress, "update", real)
    regenerate(rows_of(chats), c, tok, None, progress=False)
    assert sorted(entry["index"] for entry in cached_lines(c)) == list(range(8))
    assert len(server.requests) == 8


def test_transient_failures_and_timeouts_are_retried(server, tmp_path, tok):
    chats = [chat(i, turns=1) for i in range(3)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_concurrency=1, regenerate_timeout_s=0.3, regenerate_retries=3)
    server.plan = {0: 503, 1: "slow", 2: 429}.get
    out, _ = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert len(server.requests) == 6  # three failures, each retried once
    for chat_in, row in zip(chats, out):
        assert_regenerated_by_stand_in(chat_in, row["messages"])


def test_a_client_error_is_one_line_and_keeps_the_cache(server, tmp_path, tok):
    chats = [chat(i, turns=1) for i in range(8)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_max_rows=3)
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)  # a budget: 3 of 8
    assert counts["regenerated_rows"] == 3 and [r["messages"] for r in out[3:]] == chats[3:]
    kept = cache_path(c, None).read_bytes()
    server.model, before = "another-model", len(server.requests)  # now the name is wrong
    bigger = endpoint_cfg(server.url, tmp_path, regenerate_max_rows=8)
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of(chats), bigger, tok, None, progress=False)
    msg = str(e.value)
    assert "HTTP 404" in msg and "The model `served-model` does not exist." in msg and server.url in msg
    assert "regenerate_model='served-model'" in msg and "\n" not in msg
    assert len(server.requests) - before <= 4  # not retried: at most the requests already in flight
    assert cache_path(c, None).read_bytes() == kept


def test_the_api_key_comes_from_the_environment(server, tmp_path, tok, monkeypatch):
    """A server started with --api-key (or a gateway) answers 401 without the key: the client sends
    $OPENAI_API_KEY (or the variable data.regenerate_api_key_env names) as a bearer token, and a
    refusal is one line naming the variable, before any chat is sent."""
    chats = [chat(i, turns=1) for i in range(3)]
    server.api_key, server.models_route = "sk-served", True
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of(chats), endpoint_cfg(server.url, tmp_path), tok, None, progress=False)
    message = str(e.value)
    assert message.startswith(f"endpoint {server.url}/models answered HTTP 401: Unauthorized") and "\n" not in message
    assert "$OPENAI_API_KEY is not set" in message and server.authorizations == ["Bearer EMPTY"]  # the model list
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    server.authorizations.clear()
    server.models_route = False  # a server with no model list: the first chat is refused, not retried
    with pytest.raises(
        DraftsmithError, match=r"chat/completions answered HTTP 401: Unauthorized: .* is set but refused"
    ):
        regenerate(rows_of(chats), endpoint_cfg(server.url, tmp_path, regenerate_concurrency=1), tok, None, False)
    assert server.authorizations == ["Bearer sk-wrong"]  # one chat asked, refused, not retried
    monkeypatch.setenv("MY_GATEWAY_KEY", "sk-served")
    c = endpoint_cfg(server.url, tmp_path, regenerate_api_key_env="MY_GATEWAY_KEY")
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert counts["regenerated_rows"] == 3 and server.authorizations[-1] == "Bearer sk-served"
    for chat_in, row in zip(chats, out):
        assert_regenerated_by_stand_in(chat_in, row["messages"])


def test_template_switches_travel_in_the_request_body(server, tmp_path, tok):
    c = endpoint_cfg(server.url, tmp_path, chat_template_kwargs={"enable_thinking": False})
    regenerate(rows_of([chat(0, turns=1)]), c, tok, None, progress=False)
    ((_, body),) = server.requests
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["seed"] == c.seed


def test_a_wrong_url_is_one_line(server, tmp_path, tok):
    chats = [chat(i, turns=1) for i in range(4)]
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of(chats), endpoint_cfg(dead, tmp_path), tok, None, progress=False)
    assert (
        dead + "/chat/completions" in str(e.value) and "Connection" in str(e.value) and "after 3 tries" in str(e.value)
    )
    wrong_path = server.url.replace("/v1", "/api/v1")
    with pytest.raises(DraftsmithError, match=r"api/v1/chat/completions answered HTTP 404: Not Found"):
        regenerate(rows_of(chats), endpoint_cfg(wrong_path, tmp_path), tok, None, progress=False)
    assert not cache_path(endpoint_cfg(dead, tmp_path), None).read_text()


def test_the_cache_key_names_the_served_model(tmp_path, tiny_target):
    a = endpoint_cfg("http://127.0.0.1:1/v1", tmp_path)
    assert regen_mod.regen_key(a, None) == regen_mod.regen_key(endpoint_cfg("http://other:8000", tmp_path), None)
    assert regen_mod.regen_key(a, None) != regen_mod.regen_key(
        endpoint_cfg("http://x", tmp_path, regenerate_model="m2"), None
    )
    local = DataConfig(path=a.path, regenerate=True)
    assert regen_mod.regen_key(local, tiny_target) != regen_mod.regen_key(a, tiny_target)
    batched = regen_mod.regen_key(local, tiny_target)  # the way of running and the budget are not in it
    assert batched == regen_mod.regen_key(
        DataConfig(
            path=a.path, regenerate=True, regenerate_with="engine", regenerate_batch_size=3, regenerate_max_rows=5
        ),
        tiny_target,
    )


def test_turns_past_the_context_are_cut(server, tmp_path, tok, tiny_target):
    """tiny-random has 2,048 positions: a turn whose prompt + max_new_tokens overflow them ends the
    chat (cut after the last reply that fits); a chat whose first reply cannot fit stays as it was."""
    limit = tiny_target.config.max_position_embeddings
    fits, long_user = chat(0, turns=1), {"role": "user", "content": "x" * limit}
    chats = [fits + [long_user, {"role": "assistant", "content": "late"}], [long_user] + fits[1:], chat(2, turns=2)]
    c = endpoint_cfg(server.url, tmp_path)
    out, counts = regenerate(rows_of(chats), c, tok, tiny_target, progress=False)
    assert len(out[0]["messages"]) == 2 and out[0]["messages"][1]["content"] == reply_for(fits[:1])
    assert out[1]["messages"] == chats[1] and len(out[2]["messages"]) == 4
    assert (counts["regenerate_cut_rows"], counts["regenerate_skipped_too_long"], counts["regenerated_rows"]) == (
        1,
        1,
        2,
    )
    before = len(server.requests)
    again, counts = regenerate(rows_of(chats), c, tok, tiny_target, progress=False)
    assert len(server.requests) == before and again == out  # the cut chat is reused from the cache
    assert counts["regenerated_from_cache"] == 2


def test_the_served_context_cuts_chats_and_a_wrong_model_fails_first(server, tmp_path, tok, tiny_target):
    """A server with a shorter context than the target's (vLLM's --max-model-len) says so in GET
    /models: chats are cut to it instead of the server refusing a long one mid-run (HTTP 400);
    a model name it does not serve is one error before any chat is sent."""
    server.models_route, server.max_model_len = True, 160
    long_turn = {"role": "user", "content": "y" * 150}  # byte-level tokenizer: ~1 token per character
    chats = [chat(0, turns=1) + [long_turn, {"role": "assistant", "content": "late"}], chat(1, turns=1)]
    c = endpoint_cfg(server.url, tmp_path, regenerate_max_new_tokens=16)
    out, counts = regenerate(rows_of(chats), c, tok, tiny_target, progress=False)
    assert len(out[0]["messages"]) == 2 and counts["regenerate_cut_rows"] == 1 and counts["regenerated_rows"] == 2
    prompts = [
        tok.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True)
        for path, body in server.requests
        if path.endswith("/chat/completions")
    ]
    assert len(prompts) == 2 and all(len(p["input_ids"] if hasattr(p, "keys") else p) + 16 <= 160 for p in prompts)
    server.model, before = "another-model", len(server.requests)
    with pytest.raises(
        DraftsmithError, match=r"/v1/models serves another-model, not data.regenerate_model='served-model'"
    ):
        regenerate(rows_of([chat(5, turns=1)]), endpoint_cfg(server.url, tmp_path), tok, tiny_target, progress=False)
    assert len(server.requests) == before  # nothing was sent


# --- Empty replies, and files that are not chats -------------------------------------------------


def null_for(*chats: int):
    """The stand-in's content: null (vLLM's answer to a reply that is all reasoning, or a tool call)
    for the turns of these chats (chat(i) asks "question i.t"), the usual reply for the others."""

    def content(messages):
        if any(messages[0]["content"].startswith(f"question {i}.") for i in chats):
            return None
        return " " + reply_for(messages) + "\n"

    return content


def test_null_replies_everywhere_stop_the_run_with_the_likely_cause(server, tmp_path, tok):
    chats = [chat(i, turns=2) for i in range(6)]
    c = endpoint_cfg(server.url, tmp_path)
    server.content = lambda messages: None
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of(chats), c, tok, None, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and server.url in msg and "returned no content for 6 of 6 chats" in msg
    assert "--reasoning-parser" in msg and "enable_thinking false" in msg
    assert len(server.requests) == 6  # a chat stops at its first empty reply: no second turn after it
    assert not cache_path(c, None).read_text()  # nothing cached: a rerun does not serve empty replies


def test_a_few_null_replies_are_counted_warned_and_asked_again(server, tmp_path, tok, caplog):
    chats = [chat(i, turns=2) for i in range(8)]
    c = endpoint_cfg(server.url, tmp_path)
    server.content = null_for(3)
    with caplog.at_level(logging.WARNING, logger="draftsmith.train.data.regeneration"):
        out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert counts["regenerate_empty_rows"] == 1 and counts["regenerated_rows"] == 7
    assert out[3]["messages"] == chats[3]  # trains on the dataset's replies, not on an empty one
    assert not any(m["content"] == "" for row in out for m in row["messages"])
    assert sorted(e["index"] for e in cached_lines(c)) == [0, 1, 2, 4, 5, 6, 7]
    assert any("no content for 1 of 8 chats" in r.getMessage() for r in caplog.records)
    server.content, before = null_for(), len(server.requests)  # the server answers now
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert len(server.requests) - before == 2 and counts["regenerated_rows"] == 8  # only chat 3, both turns
    assert counts["regenerate_empty_rows"] == 0
    assert_regenerated_by_stand_in(chats[3], out[3]["messages"])


def test_a_cache_line_that_is_no_good_chat_is_asked_again(server, tmp_path, tok):
    """An empty reply cached before those were refused, a line of another shape, bytes that are not
    UTF-8: skipped (their chats are regenerated), the good lines kept, no traceback."""
    chats = [chat(i, turns=1) for i in range(5)]
    c = endpoint_cfg(server.url, tmp_path)
    path = cache_path(c, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    good = [chats[2][0], {"role": "assistant", "content": "R1<cached>"}]
    path.write_bytes(
        (json.dumps({"index": 0, "messages": [chats[0][0], {"role": "assistant", "content": ""}]}) + "\n").encode()
        + b'{"index": 1, "messages": "not turns"}\n'
        + (json.dumps({"index": 2, "messages": good}) + "\n").encode()
        + b'{"index": 3, "messages": [{"role": "user"}]}\n'
        + b"\xff\xfe not utf-8\n"
    )
    out, counts = regenerate(rows_of(chats), c, tok, None, progress=False)
    assert counts["regenerated_from_cache"] == 1 and counts["regenerated_rows"] == 5
    assert sorted(body["messages"][0]["content"][:10] for _, body in server.requests) == [
        f"question {i}" for i in (0, 1, 3, 4)
    ]
    assert out[2]["messages"] == good
    for i in (0, 1, 3, 4):
        assert_regenerated_by_stand_in(chats[i], out[i]["messages"])


def test_a_reply_that_is_not_text_is_one_line(server, tmp_path, tok):
    server.content = lambda messages: 12345
    with pytest.raises(DraftsmithError) as e:
        regenerate(rows_of([chat(0, turns=1)]), endpoint_cfg(server.url, tmp_path), tok, None, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and server.url in msg and "bad reply" in msg and "12345" in msg and "not text" in msg


def saved_cfg(server, tmp_path, saved, **kw) -> DataConfig:
    write_jsonl(tmp_path / "chats.jsonl", [chat(i, turns=1) for i in range(4)])
    return endpoint_cfg(server.url, tmp_path, regenerated_path=str(saved), pack=False, eval_rows=1, **kw)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "holds no chats: delete it to regenerate"),
        (b"\n\n", "holds no chats: delete it to regenerate"),
        (b'{"index": 0, "messages": "hi"}\n', "line 1: expected"),
        (b"[1, 2]\n", "line 1: expected"),
        (b'{"index": 0, "messages": []}\n{"index": 1, "messages": [{"role": "user"}]}\n', "line 2: expected"),
        (b'{"index": 0, "messages": []}\n\xff\xfe{"index": 1}\n', "line 2: expected"),
        (b'{"index": "zero", "messages": []}\n', "line 1: expected"),
    ],
)
def test_a_regenerated_file_that_holds_no_chats_is_one_line(server, tmp_path, tok, content, message):
    saved = tmp_path / "regenerated.jsonl"
    saved.write_bytes(content)
    with pytest.raises(DraftsmithError) as e:
        build_data(saved_cfg(server, tmp_path, saved), tok, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and str(saved) in msg and message in msg and "delete it to regenerate" in msg
    assert server.requests == []  # the file is what the recipe names: it is not silently regenerated


def test_a_regenerated_file_with_an_empty_reply_does_not_train_on_it(server, tmp_path, tok, caplog):
    saved = tmp_path / "regenerated.jsonl"
    cfg = saved_cfg(server, tmp_path, saved)
    chats = [chat(i, turns=1) for i in range(4)]
    rows = [{"index": i, "messages": [c[0], {"role": "assistant", "content": f"R{i}"}]} for i, c in enumerate(chats)]
    rows[1]["messages"][1]["content"] = ""  # written by a run before empty replies were refused
    saved.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING, logger="draftsmith.train.data.regenerated_file"):
        data = build_data(cfg, tok, progress=False)
    assert data.stats["regenerated_file_empty_rows"] == 1 and data.stats["regenerated_rows"] == 3
    assert any("1 chats hold an empty reply" in r.getMessage() for r in caplog.records)
    texts = [tok.decode(item["input_ids"][item["attention_mask"].bool()]) for item in [*data.train, *data.eval]]
    assert sum("answer 1.0" in t for t in texts) == 1 and server.requests == []


def test_a_folder_as_the_regenerated_file_says_so(server, tmp_path, tok):
    folder = tmp_path / "out"
    folder.mkdir()
    for cfg in (saved_cfg(server, tmp_path, folder), saved_cfg(server, tmp_path, folder, regenerate_endpoint=None)):
        with pytest.raises(DraftsmithError) as e:
            build_data(cfg, tok, progress=False)
        msg = str(e.value)
        assert f"data.regenerated_path {folder} is a folder: name a file" in msg and "\n" not in msg
        assert "does not exist" not in msg
    assert server.requests == []


def test_an_unwritable_regenerated_file_fails_before_the_first_request(server, tmp_path, tok):
    (tmp_path / "a-file").write_text("x")
    saved = tmp_path / "a-file" / "regenerated.jsonl"  # its folder cannot be made
    with pytest.raises(DraftsmithError) as e:
        build_data(saved_cfg(server, tmp_path, saved), tok, progress=False)
    msg = str(e.value)
    assert f"data.regenerated_path {saved} cannot be written" in msg and "nothing was regenerated" in msg
    assert server.requests == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_fails_before_the_first_request(server, tmp_path, tok):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(DraftsmithError, match="cannot be written"):
            build_data(saved_cfg(server, tmp_path, folder / "regenerated.jsonl"), tok, progress=False)
    finally:
        folder.chmod(0o700)
    assert server.requests == []


def test_the_regenerated_file_is_written_whole_by_one_rename(server, tmp_path, tok, monkeypatch):
    """Written through draftsmith.fileio.write_atomic (fsynced); a failed write is one line."""
    from draftsmith.train.data import regenerated_file

    saved = tmp_path / "regenerated.jsonl"
    calls, real = [], regenerated_file.write_atomic

    def recorded(path, content, sync=False):
        calls.append((path, sync))
        return real(path, content, sync=sync)

    monkeypatch.setattr(regenerated_file, "write_atomic", recorded)
    data = build_data(saved_cfg(server, tmp_path, saved), tok, progress=False)
    assert calls == [(saved, True)] and data.stats["regenerated_rows"] == 4
    assert [json.loads(line)["index"] for line in saved.read_text().splitlines()] == [0, 1, 2, 3]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".regenerated.jsonl")]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"regenerate_with": "endpoint"}, "needs data.regenerate_endpoint"),
        ({"regenerate_with": "endpoint", "regenerate_endpoint": "http://h:8000/v1"}, "needs data.regenerate_model"),
        ({"regenerate_endpoint": "http://h:8000/v1", "regenerate_model": "m"}, "add data.regenerate_with=endpoint"),
        ({"regenerate_with": "endpoint", "regenerate_endpoint": "h:8000", "regenerate_model": "m"}, "http(s):// URL"),
        ({"regenerate_with": "vllm"}, "is not one of batched, engine, endpoint"),
        ({"regenerate_concurrency": 0}, "regenerate_concurrency"),
        ({"regenerate_timeout_s": 0}, "regenerate_timeout_s"),
    ],
)
def test_recipe_checks(overrides, message):
    with pytest.raises(DraftsmithError, match=message.replace("(", r"\(").replace(")", r"\)")):
        recipe_from_dict({"data": {"regenerate": True, **overrides}})


# --- In-process: the batch-1 engine and batched generate --------------------------------------------


def regen_cfg(tmp_path, n=4, **kw) -> DataConfig:
    path = write_jsonl(tmp_path / "r.jsonl", [chat(i, turns=2) for i in range(n)])
    return DataConfig(path=path, regenerate=True, pack=False, **{"regenerate_max_new_tokens": 6, **kw})


def count_engine(monkeypatch) -> list:
    calls, real = [], Engine.generate

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("seed"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "generate", counted)
    return calls


def test_batched_equals_the_batch1_engine_greedy(tmp_path, tok, tiny_target):
    """Same text per chat, exactly (tiny-random is fp32): prompts of different lengths share
    left-padded batches, chats have 1-3 turns, and replies stop at their own EOS."""
    chats = [chat(i, turns=1 + i % 3, words=1 + (5 * i) % 7) for i in range(5)]
    # Make a token the target writes an EOS, one that ends the first replies at different places.
    engine = Engine(tiny_target, None, 1)
    firsts = []
    for c in chats:
        ids = tok(tok.apply_chat_template(c[:1], add_generation_prompt=True, tokenize=False), add_special_tokens=False)
        firsts.append(engine.generate(ids["input_ids"], 8, speculative=False).tokens)
    ends = {t: {r.index(t) if t in r else 8 for r in firsts} for r in firsts for t in r}
    target = copy.copy(tiny_target)
    target.eos_token_ids = tiny_target.eos_token_ids | {max(ends, key=lambda t: len(ends[t]))}
    outs = {}
    for how, size in (("engine", 1), ("batched", 3)):
        c = regen_cfg(tmp_path, regenerate_with=how, regenerate_batch_size=size, regenerate_max_new_tokens=8, seed=size)
        outs[how], _ = regenerate(rows_of(chats), c, tok, target, progress=False)
    lengths = {len(m["content"]) for r in outs["engine"] for m in r["messages"] if m["role"] == "assistant"}
    assert len(lengths) > 1  # EOS really ended some replies early
    assert [r["messages"] for r in outs["batched"]] == [r["messages"] for r in outs["engine"]]
    assert [r["messages"] for r in outs["engine"]] != chats


def test_batched_regeneration_caches_and_resumes(tmp_path, tok, tiny_target, monkeypatch, caplog):
    c = regen_cfg(tmp_path, n=6, regenerate_batch_size=2)
    first = build_data(c, tok, target=tiny_target, progress=False)
    lines = cache_path(c, tiny_target).read_bytes().splitlines(keepends=True)
    assert len(lines) == 6 and first.stats["regenerated_rows"] == 6
    cache_path(c, tiny_target).write_bytes(b"".join(lines[:3]) + lines[3][:15])  # 3 chats done, the 4th cut mid-line
    calls, real = [], regen_mod._generate

    def counted(target, prompts, *args):
        calls.append(len(prompts))
        return real(target, prompts, *args)

    monkeypatch.setattr(regen_mod, "_generate", counted)
    with caplog.at_level(logging.INFO, logger="draftsmith.train.data.regeneration"):
        again = build_data(c, tok, target=tiny_target, progress=False)
    assert sum(calls) == 3 * 2 and max(calls) == 2  # three chats of two turns, in batches of 2
    assert again.stats["regenerated_from_cache"] == 3
    assert any("3 of 6 rows from the cache" in r.getMessage() for r in caplog.records)
    assert sorted(json.loads(line)["index"] for line in cache_path(c, tiny_target).read_text().splitlines()) == list(
        range(6)
    )
    assert torch.equal(again.train.input_ids, first.train.input_ids)


def test_engine_regeneration_rewrites_assistant_turns(tmp_path, tok, tiny_target, monkeypatch):
    c = regen_cfg(tmp_path, regenerate_with="engine")
    calls = count_engine(monkeypatch)
    data = build_data(c, tok, target=tiny_target, progress=False)
    assert sorted(calls) == [0, 0, 1, 1, 2, 2, 3, 3]  # seed + row index; two assistant turns per row
    cached = {e["index"]: e["messages"] for e in cached_lines(c, tiny_target)}
    msgs = cached[0]
    assert [m["content"] for m in msgs if m["role"] == "user"] == [chat(0)[0]["content"], chat(0)[2]["content"]]
    # The first reply is exactly what the target writes after the original user turn.
    prompt = tok.apply_chat_template(msgs[:1], add_generation_prompt=True, tokenize=False)
    out = Engine(tiny_target, None, 1).generate(
        tok(prompt, add_special_tokens=False)["input_ids"], 6, seed=0, speculative=False
    )
    assert msgs[1]["content"] == tok.decode(out.tokens, skip_special_tokens=True).strip() != "answer 0.0: this."
    assert data.stats["regenerated_from_cache"] == 0

    def boom(*args, **kwargs):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(Engine, "generate", boom)
    monkeypatch.setattr(regen_mod, "_generate", boom)
    again = build_data(dataclasses.replace(c, regenerate_with="batched"), tok, target=tiny_target, progress=False)
    assert again.stats["regenerated_from_cache"] == 4  # batched reads what the engine wrote
    assert torch.equal(again.train.input_ids, data.train.input_ids)


def test_in_process_empty_replies_are_not_training_data(tmp_path, tok, tiny_target, monkeypatch):
    """A target that ends its turn at once (an EOS first) wrote nothing: not cached, and a run where
    most chats come back so stops with one line."""
    eos = sorted(tiny_target.eos_token_ids)[0]
    monkeypatch.setattr(regen_mod, "_generate", lambda target, prompts, *args: [[eos] for _ in prompts])
    c = regen_cfg(tmp_path, n=4)
    with pytest.raises(DraftsmithError, match=r"the target wrote an empty reply \(an end of turn at once\) for 4 of 4"):
        regenerate(rows_of([chat(i) for i in range(4)]), c, tok, tiny_target, progress=False)
    assert not cache_path(c, tiny_target).read_text()


def test_regeneration_needs_a_target_and_chat_data(tmp_path, tok, tiny_target):
    with pytest.raises(DraftsmithError, match="needs the target"):
        build_data(regen_cfg(tmp_path), tok, progress=False)
    path = tmp_path / "t.jsonl"
    path.write_text((json.dumps({"text": "abc"}) + "\n") * 3)
    with pytest.raises(DraftsmithError, match="needs chat data"):
        build_data(DataConfig(path=str(path), regenerate=True), tok, target=tiny_target, progress=False)
