"""The load side of `draftsmith serve-bench`: streamed OpenAI-compatible requests at a fixed
concurrency, the figures of one level, and vLLM's spec-decode counters read from `/metrics`.

Standard library only (http.client and threads): the sweep must run where only the engine and
draftsmith are installed. Nothing here knows which server it talks to beyond its base URL.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

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
    if u.scheme not in ("http", "https") or not u.hostname:
        raise DraftsmithError(f"{url}: not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


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

    def figures(self) -> dict:
        """tau (mean acceptance length, the bonus token counted), the draft tokens' acceptance rate
        and the acceptance rate at each draft position, as vLLM's own report computes them."""
        if self.drafts <= 0:
            return {"drafts": 0, "tau": None, "acceptance_rate": None, "per_position": []}
        pos = self.per_pos or {}
        return {
            "drafts": int(self.drafts),
            "draft_tokens": int(self.draft_tokens),
            "accepted_tokens": int(self.accepted),
            "tau": 1.0 + self.accepted / self.drafts,
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
    """One streamed request: seconds from sending it to its first and last output, and tokens."""

    ttft: float | None
    e2e: float
    tokens: int
    error: str | None = None


def stream(url: str, model: str, req: Request, *, api: str, max_tokens: int, temperature: float, seed: int,
           ignore_eos: bool = False, timeout: float = 600.0) -> Record:  # fmt: skip
    """Send one streamed request; its output tokens are the server's usage count (the last chunk,
    asked for with stream_options), else the chunks that carried text."""
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
    conn, _ = _connection(root_url(url), timeout)
    t0 = time.perf_counter()
    first, last, chunks, usage = None, None, 0, None
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
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
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"].get("completion_tokens")
            for c in chunk.get("choices") or []:
                text = c.get("text") if api != "chat" else (c.get("delta") or {}).get("content")
                if text:
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last, chunks = now, chunks + 1
    except (OSError, ValueError, http.client.HTTPException) as e:
        return Record(None, time.perf_counter() - t0, 0, f"{type(e).__name__}: {e}")
    finally:
        conn.close()
    end = last if last is not None else time.perf_counter()
    return Record(None if first is None else first - t0, end - t0, int(usage if usage is not None else chunks))


def run_level(url: str, model: str, requests: list[Request], concurrency: int, **kw) -> tuple[list[Record], float]:
    """All `requests`, `concurrency` in flight at a time -> (records, wall seconds)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        records = list(pool.map(lambda r: stream(url, model, r, **kw), requests))
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


def level_figures(records: list[Record], wall_s: float) -> dict:
    """Throughput over the level's wall time; TTFT and inter-token latency (a request's time from
    its first to its last output over its tokens after the first) at p50/p99 over requests."""
    ok = [r for r in records if r.error is None]
    tokens = sum(r.tokens for r in ok)
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [(r.e2e - r.ttft) / (r.tokens - 1) for r in ok if r.ttft is not None and r.tokens > 1]
    return {
        "requests": len(ok),
        "failed": len(records) - len(ok),
        "output_tokens": tokens,
        "wall_s": wall_s,
        "output_tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": len(ok) / wall_s if wall_s > 0 else None,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_s": percentile(itl, 50),
        "itl_p99_s": percentile(itl, 99),
    }
