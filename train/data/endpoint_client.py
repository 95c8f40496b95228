"""The OpenAI-compatible endpoint regeneration asks (`vllm serve`, SGLang, llama.cpp's server, a
gateway or a hosted API), through the `openai` client: the base URL, an API key from the environment
(`data.regenerate_api_key_env`, OPENAI_API_KEY by default; `vllm serve --api-key` and gateways
answer 401 without it), a timeout per request, and `chat_template_kwargs` in the request body
(`extra_body`: vLLM and SGLang pass them to the chat template).

Retries are ours, not the client's (`max_retries=0`): bounded, with exponential backoff, for
transient failures only (connection refused or reset, a timeout, HTTP 429 or 5xx), and stopped at
once when another chat failed for good. Every failure that is final is one DraftsmithError line
naming the URL and the server's own words.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig

log = logging.getLogger("draftsmith.train.data.regeneration")

BACKOFF_S = 1.0  # first retry after this, doubling, capped at MAX_BACKOFF_S
MAX_BACKOFF_S = 30.0
# sent when no key is set: vLLM's own examples send it; servers without --api-key ignore it
NO_KEY = "EMPTY"


class Transient(Exception):
    """A failure worth retrying (connection refused/reset, timeout, HTTP 429 or 5xx)."""


class Stopped(Exception):
    """Another request failed for good: this one is not sent."""


def _openai():
    try:
        import openai
    except ImportError:
        raise DraftsmithError(
            "data.regenerate_with endpoint asks the server through the openai client: pip install openai "
            "(or draftsmith[train])"
        ) from None
    return openai


class Endpoint:
    """POST {base}/chat/completions and GET {base}/models through one shared `openai.OpenAI` client
    (its connection pool is shared by the regeneration threads)."""

    def __init__(self, cfg: DataConfig, stop: threading.Event):
        base = cfg.regenerate_endpoint.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.url = self.base + "/chat/completions"
        self.cfg, self.stop = cfg, stop
        self.openai = _openai()
        key = os.environ.get(cfg.regenerate_api_key_env) or NO_KEY
        self.client = self.openai.OpenAI(
            base_url=self.base, api_key=key, timeout=cfg.regenerate_timeout_s, max_retries=0
        )

    def served_context(self) -> int | None:
        """The served model's context length from GET /models (vLLM lists `max_model_len`), so
        that chats are cut before the server would refuse them; a server that does not list the
        model, or refuses the key, is one clear error before any chat is sent. None when the server
        does not say."""
        url = self.base + "/models"
        try:
            listed = json.loads(self.client.models.with_raw_response.list().http_response.text).get("data") or []
        except self.openai.AuthenticationError as e:
            raise DraftsmithError(f"endpoint {url} answered HTTP 401{_detail(e)}: {self._key_hint()}") from None
        except (self.openai.OpenAIError, ValueError, AttributeError):  # no such route, not JSON: the first chat tells
            return None
        ids = [m.get("id") for m in listed if isinstance(m, dict)]
        entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == self.cfg.regenerate_model), None)
        if entry is None and ids:
            raise DraftsmithError(
                f"endpoint {url} serves {', '.join(map(str, ids))}, not data.regenerate_model="
                f"{self.cfg.regenerate_model!r}"
            )
        value = (entry or {}).get("max_model_len")
        return int(value) if isinstance(value, int) and value > 0 else None

    def chat(self, messages: list[dict], seed: int) -> tuple[str, int]:
        """The reply's text and its token count (as the server's usage reports it)."""
        answer = self._post(messages, seed)
        try:
            text = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise DraftsmithError(
                f"endpoint {self.url} answered without choices[0].message.content: {json.dumps(answer)[:160]}"
            ) from None
        if text is None:  # a reply that is all reasoning (under a reasoning parser) or a tool call
            text = ""
        if not isinstance(text, str):
            raise DraftsmithError(
                f"endpoint {self.url} answered a bad reply: choices[0].message.content is "
                f"{json.dumps(text)[:80]}, not text (data.regenerate_model={self.cfg.regenerate_model!r})"
            )
        usage = answer.get("usage")
        try:
            tokens = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
        except (TypeError, ValueError):
            tokens = 0
        return text.strip(), tokens

    def _post(self, messages: list[dict], seed: int) -> dict:
        tries = self.cfg.regenerate_retries + 1
        for attempt in range(tries):
            if self.stop.is_set():
                raise Stopped
            try:
                return self._once(messages, seed)
            except Transient as e:
                if attempt + 1 == tries:
                    hint = (
                        "the server failed"
                        if str(e).startswith("HTTP")
                        else "is the server up and data.regenerate_endpoint right?"
                    )
                    raise DraftsmithError(f"endpoint {self.url}: {e} (after {tries} tries); {hint}") from None
                delay = min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt) * (1 + random.random() / 4)
                log.info("endpoint %s: %s; retrying in %.1f s", self.url, e, delay)
                self.stop.wait(delay)
        raise AssertionError("unreachable")

    def _once(self, messages: list[dict], seed: int) -> dict:
        cfg, openai = self.cfg, self.openai
        extra = {"chat_template_kwargs": cfg.chat_template_kwargs} if cfg.chat_template_kwargs else None
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=cfg.regenerate_model,
                messages=messages,
                max_tokens=cfg.max_new_tokens(),
                temperature=cfg.regenerate_temperature,
                top_p=1.0,
                seed=seed,
                stream=False,
                extra_body=extra,
            )
        except openai.APIStatusError as e:
            code = e.status_code
            if code == 429 or code >= 500:
                raise Transient(f"HTTP {code}{_detail(e)}") from None
            hint = f": {self._key_hint()}" if code == 401 else f" (data.regenerate_model={cfg.regenerate_model!r})"
            raise DraftsmithError(f"endpoint {self.url} answered HTTP {code}{_detail(e)}{hint}") from None
        except openai.APITimeoutError:
            raise Transient("timed out (data.regenerate_timeout_s)") from None
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            raise Transient(f"{type(cause).__name__}: {cause}" if str(cause) else "Connection error") from None
        text = raw.http_response.text
        try:
            return json.loads(text)
        except ValueError:
            raise DraftsmithError(f"endpoint {self.url} answered something that is not JSON: {text[:120]!r}") from None

    def _key_hint(self) -> str:
        name = self.cfg.regenerate_api_key_env
        where = "is set but refused" if os.environ.get(name) else "is not set"
        return f"the server wants an API key; ${name} {where} (data.regenerate_api_key_env names the variable)"


def _detail(e) -> str:
    """The server's own words, e.g. vLLM's {"message": "The model `x` does not exist."}."""
    body = getattr(e, "body", None)
    message = body if isinstance(body, str) else None  # the client hands over a JSON answer's "error" alone
    if isinstance(body, dict):
        error = body.get("error")
        message = body.get("message") or (error.get("message") if isinstance(error, dict) else error)
    if not isinstance(message, str):
        response = getattr(e, "response", None)
        message = getattr(response, "text", None) or getattr(response, "reason_phrase", "")
    text = " ".join(str(message).split())[:200]
    return f": {text}" if text else ""
