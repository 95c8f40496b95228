"""Regeneration: the target rewrites every assistant turn of the training chats, so a drafter
learns what the target itself writes (self-distillation: Medusa, Cai et al. 2024, sec. 3.3;
what SpecForge, speculators and ModelOpt do before training EAGLE-3 drafts).

Turn i+1 is answered after the *regenerated* turn i, so a chat is generated turn by turn. Three
ways to run the target (`data.regenerate_with`), one cache:

    batched   in-process: the next assistant turn of up to `regenerate_batch_size` chats decoded
              together (transformers `generate`, left padding); the default
    engine    in-process: our batch-1 runtime, one turn at a time (the reference: slow)
    endpoint  an OpenAI-compatible server (`vllm serve`, SGLang, llama.cpp's server, a gateway...):
              POST {base}/chat/completions with the history as messages, chats in parallel, through
              the openai client with an API key from the environment (endpoint_client.py)

The cache, ~/.cache/draftsmith/regenerated/<key>.jsonl, holds one line {"index", "messages"} per
finished chat, keyed by the chat's row index and fsynced as it is written (in completion order,
which may differ from row order), under an exclusive flock (one writer; other DDP ranks wait
then read). A killed run resumes: rows already in the cache are never asked for again. The key
hashes what decides the outputs: the data source, the filters, the model (the target's name,
or the endpoint's served model), max new tokens, temperature and seed; not the way of running
nor the budget (`regenerate_max_rows`), so a larger budget later extends the same cache.

An empty reply (an endpoint's `"content": null`: vLLM answers it for a reply that is all reasoning
under a reasoning parser, or a tool call) is no training data: its chat is not cached, trains on
the dataset's replies, is counted and warned of, and a rerun asks again; a run where most chats come
back empty stops with one line naming the likely cause.
"""

from __future__ import annotations

import collections
import concurrent.futures
import fcntl  # POSIX file lock on the cache (draftsmith runs on Linux/macOS)
import hashlib
import json
import logging
import os
import pathlib
import tempfile
import threading
import time

import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.models.cache_folder import cache_dir
from draftsmith.train.config import DataConfig

from .endpoint_client import Endpoint, Stopped

log = logging.getLogger(__name__)

REGEN_FORMAT = 1  # bump when regeneration changes, so old cache files are not reused
POOL_FACTOR = 4  # batched: chats in progress per batch slot (the shortest prompts go first)
EMPTY_SAMPLE = 10  # chats asked before "most replies are empty" may stop a run (all of them if fewer)
EMPTY = object()  # what a chat whose target wrote an empty reply ends as (never cached)


def cache_path(cfg: DataConfig, target) -> pathlib.Path:
    return cache_dir() / "regenerated" / f"{regen_key(cfg, target)}.jsonl"


def regen_key(cfg: DataConfig, target) -> str:
    """Short sha256 of everything that decides the regenerated rows (in-process: the same key as
    before batching existed, so batch-1 caches resume batched)."""
    source = [cfg.path, cfg.name, cfg.split, cfg.messages_column]
    local = pathlib.Path(cfg.path).expanduser()
    if local.is_file():  # a rewritten local file gets a fresh cache
        st = local.stat()
        source += [str(local.resolve()), st.st_size, st.st_mtime_ns]
    model = f"endpoint:{cfg.regenerate_model}" if cfg.regenerate_with == "endpoint" else str(target.name)
    parts = [
        model,
        *source,
        cfg.max_rows,
        cfg.max_turn_chars,
        cfg.max_new_tokens(),
        cfg.regenerate_temperature,
        cfg.seed,
        REGEN_FORMAT,
    ]
    if cfg.chat_template_kwargs:  # only when set: caches made without it keep their key
        parts.append(sorted(cfg.chat_template_kwargs.items()))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def regenerate(rows: list[dict], cfg: DataConfig, tokenizer, target, progress: bool) -> tuple[list[dict], dict]:
    """`rows` with the assistant turns of the first `regenerate_max_rows` (all if None) written
    by the target, plus any other row the cache already holds; the rest as they were.
    Returns (rows, counts)."""
    if cfg.regenerated_path:  # where the chats go once all are done: writable before the first request
        check_writable(pathlib.Path(cfg.regenerated_path).expanduser())
    path = cache_path(cfg, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = _context_limit(target, tokenizer)
    with open(path, "a+b") as f:  # append mode: every write lands at the end
        try:  # one writer per file: another DDP rank waits here, then finds every row done
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is regenerating into %s", path)
            fcntl.flock(f, fcntl.LOCK_EX)
        done = _read_cache(f, path)
        budget = rows if cfg.regenerate_max_rows is None else rows[: cfg.regenerate_max_rows]
        todo = [r for r in budget if not same_prompts(done.get(r["index"]), r["messages"])]
        counts = {
            "regenerated_from_cache": len(budget) - len(todo),
            "regenerate_cut_rows": 0,
            "regenerate_skipped_too_long": 0,
            "regenerate_empty_rows": 0,
        }
        asked, stopped = [0], [False]  # chats the target answered in this run; the empty-reply stop raised
        log.info(
            "regeneration (%s): %d of %d rows from the cache %s, %d to generate; %d rows beyond "
            "data.regenerate_max_rows stay as they are",
            cfg.regenerate_with,
            counts["regenerated_from_cache"],
            len(budget),
            path,
            len(todo),
            len(rows) - len(budget),
        )

        def write(index: int, messages) -> None:
            """Record a finished chat (None: its first reply does not fit the context; EMPTY: the target
            wrote an empty reply; both kept as they were and not cached)."""
            if messages is None:
                counts["regenerate_skipped_too_long"] += 1
                return
            asked[0] += 1
            if messages is EMPTY:
                counts["regenerate_empty_rows"] += 1
                empty = counts["regenerate_empty_rows"]
                if not stopped[0] and 2 * empty > asked[0] >= min(EMPTY_SAMPLE, len(todo)):
                    stopped[0] = True  # once: the chats still finishing are recorded, not raised on again
                    raise DraftsmithError(_empty_replies(cfg, empty, asked[0]))
                return
            done[index] = messages
            f.write((json.dumps({"index": index, "messages": messages}) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())

        run = {"batched": _batched, "engine": _engine, "endpoint": _endpoint}[cfg.regenerate_with]
        with _Progress(len(todo), progress) as bar:
            run(todo, cfg, tokenizer, target, limit, write, bar)
    if counts["regenerate_empty_rows"]:
        log.warning(
            "regeneration: %s; those chats train on the dataset's replies and a rerun asks again",
            _empty_replies(cfg, counts["regenerate_empty_rows"], asked[0]),
        )
    out = []
    for row in rows:
        cached = done.get(row["index"])
        if same_prompts(cached, row["messages"]):
            counts["regenerate_cut_rows"] += len(cached) < len(row["messages"])
            row = dict(row, messages=cached)
        out.append(row)
    counts["regenerated_rows"] = sum(same_prompts(done.get(r["index"]), r["messages"]) for r in rows)
    return out, counts


def _empty_replies(cfg: DataConfig, empty: int, asked: int) -> str:
    """One line: how many chats came back with an empty reply, and the likely cause."""
    if cfg.regenerate_with == "endpoint":
        return (
            f"the endpoint {cfg.regenerate_endpoint} returned no content for {empty} of {asked} chats: a reasoning "
            "parser or tool-call reply? serve without --reasoning-parser or set data.chat_template_kwargs "
            "enable_thinking false"
        )
    return (
        f"the target wrote an empty reply (an end of turn at once) for {empty} of {asked} chats: check its chat "
        "template and data.chat_template_kwargs"
    )


def chat_entry(line: bytes | str) -> tuple[int, list[dict]]:
    """(index, messages) of one {"index", "messages"} line; ValueError for anything else (not
    UTF-8, not JSON, another shape)."""
    entry = json.loads(line)
    if not isinstance(entry, dict) or not valid_chat(entry.get("messages")):
        raise ValueError("not a chat")
    index = entry.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError("no index")
    return index, entry["messages"]


def valid_chat(messages) -> bool:
    """A list of {"role": str, "content": str} turns."""
    return isinstance(messages, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    )


def has_empty_reply(messages: list[dict]) -> bool:
    return any(m["role"] == "assistant" and not m["content"].strip() for m in messages)


def _read_cache(f, path: pathlib.Path) -> dict[int, list[dict]]:
    """Rows already done; a partial line left by a killed run is cut off. A whole line that is not
    a chat, or a chat with an empty reply (cached before those were refused), is skipped: its row
    is asked for again."""
    f.seek(0)
    data, done = f.read(), {}
    lines = data.split(b"\n")
    bad = []  # the index of each skipped line (None: not a chat)
    for line in lines[:-1]:  # the piece after the last newline is never complete
        try:
            index, messages = chat_entry(line)
        except ValueError:
            bad.append(None)
            continue
        if has_empty_reply(messages):
            bad.append(index)
            continue
        done[index] = messages
    skipped = sum(1 for index in bad if index not in done)  # not those a later line answered again
    if skipped:
        log.warning(
            "regeneration cache %s: %d lines skipped (not a chat, or a chat with an empty reply): asked again",
            path,
            skipped,
        )
    if lines[-1]:
        log.info("regeneration cache %s: dropping %d bytes of an unfinished line", path, len(lines[-1]))
        f.truncate(len(data) - len(lines[-1]))
    return done


def same_prompts(cached: list[dict] | None, messages: list[dict]) -> bool:
    """A cached row is reused only if it answers the same non-assistant turns (a row cut where
    the context ran out answers a prefix of them)."""
    if not cached or len(cached) > len(messages):
        return False
    return all(
        a["role"] == b["role"] and (a["role"] == "assistant" or a["content"] == b["content"])
        for a, b in zip(cached, messages)
    )


def _context_limit(target, tokenizer) -> int | None:
    """Positions a prompt plus its reply may fill: the target's, else the tokenizer's if it says."""
    limit = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    limit = limit or getattr(tokenizer, "model_max_length", None)
    return int(limit) if limit and limit < 10**7 else None  # tokenizers without one say 1e30


def _conversation(messages: list[dict], tokenizer, limit: int | None, max_new: int, template: dict | None = None):
    """A chat regenerated turn by turn, as a coroutine: yields (history, prompt ids) before each
    assistant turn and is sent the reply text. Returns the new messages; cut before the first
    turn whose prompt + max_new tokens overflow `limit` (None if that is the first reply); EMPTY at the
    first empty reply."""
    history = []
    for m in messages:
        if m["role"] != "assistant":
            history.append(m)
            continue
        text = tokenizer.apply_chat_template(history, add_generation_prompt=True, tokenize=False, **(template or {}))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if limit is not None and len(ids) + max_new > limit:
            last = max((i for i, h in enumerate(history) if h["role"] == "assistant"), default=None)
            return None if last is None else history[: last + 1]
        reply = yield history, ids
        if not reply:  # no training data; the chat is not cached and keeps its own replies
            return EMPTY
        history.append({"role": "assistant", "content": reply})
    return history


class _Progress:
    """tqdm over chats with generated tokens/s beside it."""

    def __init__(self, total: int, enabled: bool):
        self.bar = tqdm(total=total, desc="regenerating", unit="row", disable=not enabled)
        self.tokens, self.start = 0, time.perf_counter()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        elapsed = time.perf_counter() - self.start
        if self.tokens:
            log.info("regeneration: %d tokens in %.0f s (%.1f tokens/s)", self.tokens, elapsed, self.tokens / elapsed)
        self.bar.close()

    def update(self, rows: int, tokens: int) -> None:
        self.tokens += tokens
        self.bar.set_postfix_str(
            f"{self.tokens / max(time.perf_counter() - self.start, 1e-9):.1f} tok/s", refresh=False
        )
        self.bar.update(rows)


def _drive(chat, reply_to):
    """Run a `_conversation` to its end, answering each turn with reply_to(history, ids)."""
    try:
        step = next(chat)
        while True:
            step = chat.send(reply_to(*step))
    except StopIteration as end:
        return end.value


# --- In-process: the batch-1 engine and batched generate ------------------------------------------


def _engine(todo, cfg, tokenizer, target, limit, write, bar) -> None:
    engine, sampling = Engine(target, None, 1), SamplingConfig(cfg.regenerate_temperature)
    for row in todo:
        tokens = 0

        def reply(history, ids, seed=cfg.seed + row["index"]):
            nonlocal tokens
            out = engine.generate(ids, cfg.max_new_tokens(), sampling, seed=seed, speculative=False)
            tokens += len(out.tokens)
            return tokenizer.decode(out.tokens, skip_special_tokens=True).strip()

        write(
            row["index"],
            _drive(
                _conversation(row["messages"], tokenizer, limit, cfg.max_new_tokens(), cfg.chat_template_kwargs), reply
            ),
        )
        bar.update(1, tokens)


def _batched(todo, cfg, tokenizer, target, limit, write, bar) -> None:
    """Up to POOL_FACTOR x batch chats in progress; each step answers the next assistant turn of
    the batch_size chats with the shortest prompts (similar lengths, little padding), writes the
    chats that are finished and takes in new ones. Sampling is seeded per step (cfg.seed + the
    step's first row index): reproducible for the same batches, not per row."""
    queue, active = collections.deque(todo), []  # active: [row, coroutine, (history, ids)]
    eos = sorted(target.eos_token_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    size = cfg.regenerate_batch_size
    while queue or active:
        while queue and len(active) < POOL_FACTOR * size:
            row = queue.popleft()
            chat = _conversation(row["messages"], tokenizer, limit, cfg.max_new_tokens(), cfg.chat_template_kwargs)
            active.append([row, chat, None])
        finished = 0
        for item in list(active):
            if item[2] is None:  # a new chat: run it to its first assistant turn
                try:
                    item[2] = next(item[1])
                except StopIteration as end:
                    write(item[0]["index"], end.value)
                    active.remove(item)
                    finished += 1
        if not active:
            bar.update(finished, 0)
            continue
        batch = sorted(active, key=lambda item: len(item[2][1]))[:size]
        outs = _generate(target, [item[2][1] for item in batch], cfg, eos, pad, cfg.seed + batch[0][0]["index"])
        for item, tokens in zip(batch, outs):
            text = tokenizer.decode(tokens, skip_special_tokens=True).strip()
            try:
                item[2] = item[1].send(text)
            except StopIteration as end:
                write(item[0]["index"], end.value)
                active.remove(item)
                finished += 1
        bar.update(finished, sum(len(t) for t in outs))


@torch.inference_mode()
def _generate(
    target, prompts: list[list[int]], cfg: DataConfig, eos: list[int], pad: int, seed: int
) -> list[list[int]]:
    """One reply per prompt from transformers' `generate` on left-padded prompts; each reply
    ends at its first EOS (kept, as the engine keeps it) or after max_new_tokens."""
    from transformers import GenerationConfig

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
    sampling = (
        {"do_sample": True, "temperature": cfg.regenerate_temperature, "top_k": 0, "top_p": 1.0}
        if cfg.regenerate_temperature > 0
        else {"do_sample": False}
    )
    # A fresh config: the model's own defaults (sampling, lengths) must not change the outputs.
    gen = GenerationConfig(max_new_tokens=cfg.max_new_tokens(), eos_token_id=eos, pad_token_id=pad, **sampling)
    device = target.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        out = target.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=gen)
    replies = []
    for row in out[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        replies.append(row[:end])
    return replies


# --- An OpenAI-compatible endpoint -----------------------------------------------------------------


def _endpoint(todo, cfg, tokenizer, target, limit, write, bar) -> None:
    """Chats in parallel (`regenerate_concurrency` threads; a chat's own turns in order). Each is
    written as it completes; on a failure that is final, the chats already finished are written,
    nothing new is sent, and one DraftsmithError is raised."""
    stop, lock = threading.Event(), threading.Lock()  # lock: fast tokenizers are not thread-safe
    client = Endpoint(cfg, stop)
    served = client.served_context()
    if served is not None and (limit is None or served < limit):
        log.info(
            "endpoint serves %s with a context of %d tokens: chats are cut to fit it", cfg.regenerate_model, served
        )
        limit = served

    def one(row: dict):
        tokens = 0

        def reply(history, ids):
            nonlocal tokens
            text, n = client.chat(history, cfg.seed + row["index"])
            tokens += n
            return text

        def locked(chat):  # the coroutine tokenizes between turns: under the lock
            try:
                with lock:
                    step = next(chat)
                while True:
                    text = reply(*step)
                    with lock:
                        step = chat.send(text)
            except StopIteration as end:
                return end.value

        try:
            chat = _conversation(row["messages"], tokenizer, limit, cfg.max_new_tokens(), cfg.chat_template_kwargs)
            return row["index"], locked(chat), tokens
        except DraftsmithError:
            stop.set()  # at once, not when the main thread gets to it: no new request after a final failure
            raise

    error, written, futures = None, set(), []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.regenerate_concurrency)

    def record(future, update: bool = True) -> None:
        index, messages, tokens = future.result()
        written.add(future)
        write(index, messages)
        if update:
            bar.update(1, tokens)

    try:
        futures = [pool.submit(one, row) for row in todo]
        for future in concurrent.futures.as_completed(futures):
            try:
                record(future)
            except (Stopped, concurrent.futures.CancelledError):
                continue
            except Exception as e:  # the first final failure stops the rest
                if error is None:
                    error = e
                    stop.set()
                    for other in futures:
                        other.cancel()
    finally:
        stop.set()  # on an interrupt too: requests not yet sent are not sent
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:  # chats that finished while we were interrupted are kept too
            if future not in written and future.done() and not future.cancelled() and future.exception() is None:
                record(future, update=False)
    if error is not None:
        raise error


def check_writable(path: pathlib.Path) -> None:
    """The file can be written where it is named (its folder made if missing): checked before a
    regeneration, not found out once every chat is done."""
    if path.is_dir():
        raise DraftsmithError(
            f"data.regenerated_path {path} is a folder: name a file, e.g. {path / 'regenerated.jsonl'}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise DraftsmithError(
            f"data.regenerated_path {path} cannot be written ({e.strerror or e}): make {path.parent} a writable "
            "folder or name another file; nothing was regenerated"
        ) from None
