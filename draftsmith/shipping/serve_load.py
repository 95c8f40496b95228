"""The load side of `draftsmith serve-bench`: streamed OpenAI-compatible requests at a fixed
concurrency, the figures of one level, and vLLM's spec-decode counters read from `/metrics`.

Standard library only (http.client and threads): the sweep must run where only the engine and
draftsmith are installed. Nothing here knows which server it talks to beyond its base URL.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError

# vLLM's counters (prometheus_client appends _total to a counter's name; older builds did not).
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')


def root_url(url: str) -> str:
    """http://host:port from a base URL given with or without /v1 (where /metrics and /version live)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _connection(url: str, timeout: float):
    u = urllib.parse.urlsplit(url)
    try:
        port = u.port
    except ValueError:  # a port outside 0-65535, or not a number
        raise DraftsmithError(f"{url}: the port must be a number from 1 to 65535") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise DraftsmithError(f"{url}: not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, port, timeout=timeout), u.path.rstrip("/")


def check_url(url: str, flag: str) -> str:
    """The URL as root_url gives it, or one line naming the flag: not http(s), or a bad port."""
    try:
        _connection(root_url(url), 1.0)
    except DraftsmithError as e:
        raise DraftsmithError(f"{flag} {e}") from None
    return root_url(url)


def get(url: str, path: str, timeout: float = 30.0, flag: str = "--base-url") -> str:
    """GET root_url(url) + path -> the body; an unreachable server or an error status is one line."""
    conn, _ = _connection(root_url(url), timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read().decode("utf-8", "replace")
    except OSError as e:
        raise DraftsmithError(f"{flag} {url}: cannot reach the server ({e})") from None
    finally:
        conn.close()
    if r.status != 200:
        raise DraftsmithError(f"{flag} {url}: GET {path} answered HTTP {r.status}")
    return body


def served_model(url: str, flag: str = "--base-url") -> str:
    """The first model the server lists at /v1/models."""
    try:
        data = json.loads(get(url, "/v1/models", flag=flag))["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise DraftsmithError(f"{flag} {url}: /v1/models lists no model; name one with --model") from None


def engine_version(url: str) -> str | None:
    try:
        return json.loads(get(url, "/version")).get("version")
    except (DraftsmithError, ValueError, AttributeError):
        return None


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] | None = None

    def minus(self, before: SpecCounters) -> SpecCounters:
        pos = {p: v - (before.per_pos or {}).get(p, 0.0) for p, v in (self.per_pos or {}).items()}
        return SpecCounters(
            self.drafts - before.drafts, self.draft_tokens - before.draft_tokens, self.accepted - before.accepted, pos
        )

    def went_backwards(self) -> bool:
        """A difference with a negative count: the server restarted (or its counters were reset)
        between the two reads, so it says nothing about the requests in between."""
        return min(self.drafts, self.draft_tokens, self.accepted, *(self.per_pos or {}).values()) < 0

    def figures(self) -> dict:
        """mean_acceptance_length (tau: 1 + accepted / drafts, the bonus token counted; `tau` is
        the same figure under its old key, kept for one release), the draft tokens' acceptance rate
        and the acceptance rate at each draft position, as vLLM's own report computes them."""
        if self.went_backwards():
            return {"valid": False, "drafts": None, "mean_acceptance_length": None, "tau": None,
                    "acceptance_rate": None, "per_position": [],
                    "note": "the spec-decode counters went backwards (the server restarted?)"}  # fmt: skip
        if self.drafts <= 0:
            return {"valid": True, "drafts": 0, "mean_acceptance_length": None, "tau": None,
                    "acceptance_rate": None, "per_position": []}  # fmt: skip
        pos = self.per_pos or {}
        tau = 1.0 + self.accepted / self.drafts
        return {
            "valid": True,
            "drafts": int(self.drafts),
            "draft_tokens": int(self.draft_tokens),
            "accepted_tokens": int(self.accepted),
            "mean_acceptance_length": tau,
            "tau": tau,
            "acceptance_rate": self.accepted / self.draft_tokens if self.draft_tokens else None,
            "per_position": [pos[p] / self.drafts for p in sorted(pos)],
        }


def parse_metrics(text: str, url: str = "", flag: str = "--base-url") -> SpecCounters | None:
    """The spec-decode counters in a Prometheus text page, summed over label sets (several engines
    or models) except `position`; None where the server is vLLM but drafts nothing. A page with no
    vllm: metric at all is not vLLM's: one line."""
    names, found = set(), {}
    pos: dict[int, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or line.startswith("#"):
            continue
        name = m.group(1)
        names.add(name)
        if name.endswith("_created"):
            continue
        name = name.removesuffix("_total")
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        if name == PER_POS:
            p = _POSITION.search(m.group(3) or "")
            if p:
                pos[int(p.group(1))] = pos.get(int(p.group(1)), 0.0) + value
        elif name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            found[name] = found.get(name, 0.0) + value
    if not any(n.startswith("vllm:") for n in names):
        raise DraftsmithError(f"{flag} {url}: /metrics has no vllm: metrics; serve-bench needs a vLLM server")
    if DRAFTS not in found:
        return None
    return SpecCounters(found[DRAFTS], found.get(DRAFT_TOKENS, 0.0), found.get(ACCEPTED, 0.0), pos)


def read_counters(url: str, flag: str = "--base-url") -> SpecCounters | None:
    return parse_metrics(get(url, "/metrics", flag=flag), url, flag)


@dataclass
class Request:
    category: str
    messages: list[dict]
    template_kwargs: dict | None = None  # the chat template's switches, e.g. {"enable_thinking": False}


@dataclass
class Record:
    """One streamed request: seconds from sending it to its first and last output, tokens, and the
    seconds between consecutive chunks that carried text (vLLM's inter-token latencies)."""

    ttft: float | None
    e2e: float
    tokens: int
    error: str | None = None
    gaps: list[float] = field(default_factory=list)


class Cancel:
    """The connections of the requests in flight, so that Ctrl-C can close them at once instead of
    waiting up to --request-timeout for a hung one; a request started after cancel() fails."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open: set = set()
        self.cancelled = False

    def add(self, conn) -> bool:
        with self.lock:
            if not self.cancelled:
                self.open.add(conn)
            return not self.cancelled

    def discard(self, conn) -> None:
        with self.lock:
            self.open.discard(conn)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            conns = list(self.open)
        for conn in conns:
            sock = getattr(conn, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def stream(url: str, model: str, req: Request, *, api: str, max_tokens: int, temperature: float, seed: int,
           ignore_eos: bool = False, timeout: float = 600.0, cancel: Cancel | None = None) -> Record:  # fmt: skip
    """Send one streamed request; its output tokens are the server's usage count (the last chunk,
    asked for with stream_options), else the chunks that carried text. A stream that ends before
    `data: [DONE]` and without the usage chunk was cut off: a failed request, not a short answer."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    if api == "chat":
        body["messages"] = req.messages
        if req.template_kwargs:  # vLLM's extension of the chat API
            body["chat_template_kwargs"] = req.template_kwargs
        path = "/v1/chat/completions"
    else:
        body["prompt"] = "\n\n".join(str(m.get("content", "")) for m in req.messages)
        path = "/v1/completions"
    if not math.isfinite(temperature) or temperature < 0:  # json.dumps would send NaN/Infinity: not JSON
        raise DraftsmithError(f"--temperature {temperature}: must be a finite number >= 0")
    conn, _ = _connection(root_url(url), timeout)
    t0 = time.perf_counter()
    first, last, chunks, usage, done, gaps = None, None, 0, None, False, []
    if cancel is not None and not cancel.add(conn):
        return Record(None, 0.0, 0, "cancelled (Ctrl-C)")
    try:
        conn.request("POST", path, json.dumps(body, allow_nan=False), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return Record(None, time.perf_counter() - t0, 0, f"HTTP {r.status}: {r.read()[:200]!r}")
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
            for c in chunk.get("choices") or []:
                text = c.get("text") if api != "chat" else (c.get("delta") or {}).get("content")
                if text:
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    first = first if first is not None else now
                    last, chunks = now, chunks + 1
    except (OSError, ValueError, http.client.HTTPException) as e:
        if cancel is not None and cancel.cancelled:
            return Record(None, time.perf_counter() - t0, 0, "cancelled (Ctrl-C)")
        return Record(None, time.perf_counter() - t0, 0, f"{type(e).__name__}: {e}")
    finally:
        if cancel is not None:
            cancel.discard(conn)
        conn.close()
    if not done and usage is None:
        why = "cancelled (Ctrl-C)" if cancel is not None and cancel.cancelled else "the stream ended before [DONE]"
        return Record(None, time.perf_counter() - t0, 0, f"{why} after {chunks} chunks")
    end = last if last is not None else time.perf_counter()
    ttft = None if first is None else first - t0
    return Record(ttft, end - t0, int(usage if usage is not None else chunks), gaps=gaps)


def run_level(url: str, model: str, requests: list[Request], concurrency: int, *, cancel: Cancel | None = None,
              peak: list | None = None, **kw) -> tuple[list[Record], float]:  # fmt: skip
    """All `requests`, `concurrency` in flight at a time -> (records, wall seconds); `peak` (a
    one-item list) gets the most requests that were in flight at once. Ctrl-C closes every
    connection in flight at once (through `cancel`) and raises KeyboardInterrupt without waiting
    for them."""
    cancel = cancel if cancel is not None else Cancel()
    lock, now = threading.Lock(), [0]
    peak = peak if peak is not None else [0]

    def one(r: Request) -> Record:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        try:
            return stream(url, model, r, cancel=cancel, **kw)
        finally:
            with lock:
                now[0] -= 1

    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        records = list(pool.map(one, requests))
    except BaseException:
        cancel.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return records, time.perf_counter() - t0


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


# The keys of one release before, in seconds: ttft_*_s as ttft, itl_*_s as what is now tpot (the
# time per output token after the first), still written so that older readers keep working.
OLD_KEYS = {"ttft_p50_s": "median_ttft_ms", "ttft_p99_s": "p99_ttft_ms", "itl_p50_s": "median_tpot_ms",
            "itl_p99_s": "p99_tpot_ms"}  # fmt: skip


def level_figures(records: list[Record], wall_s: float, max_concurrency_seen: int | None = None) -> dict:
    """Throughput over the level's wall time, and in milliseconds with vLLM's names (`vllm bench
    serve`): TTFT, TPOT (a request's time from its first to its last output over its tokens after
    the first; mean, median and p99 over requests) and ITL (the gaps between consecutive streamed
    chunks, pooled over requests). Failed requests (an error status, a cut-off stream) count in
    `failed` and in none of the figures."""
    ok = [r for r in records if r.error is None]
    tokens = sum(r.tokens for r in ok)
    ttft = [r.ttft for r in ok if r.ttft is not None]
    tpot = [(r.e2e - r.ttft) / (r.tokens - 1) for r in ok if r.ttft is not None and r.tokens > 1]
    itl = [g for r in ok for g in r.gaps]
    out = {
        "requests": len(ok),
        "failed": len(records) - len(ok),
        "output_tokens": tokens,
        "wall_s": wall_s,
        "max_concurrency_seen": max_concurrency_seen,
        "output_tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": len(ok) / wall_s if wall_s > 0 else None,
    }
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        out[f"mean_{name}_ms"] = _ms(_mean(xs))
        out[f"median_{name}_ms"] = _ms(percentile(xs, 50))
        out[f"p99_{name}_ms"] = _ms(percentile(xs, 99))
    for old, new in OLD_KEYS.items():
        out[old] = None if out[new] is None else out[new] / 1e3
    return out
