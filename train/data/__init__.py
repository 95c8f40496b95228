"""Training data for drafters: load, filter, hold out, (optionally) regenerate, tokenise, pack.

    rows, fmt = load_rows(cfg)         chitchat | sharegpt | stdlib | local .json/.jsonl/.parquet | hub id
    -> filter (counted, logged)        empty, no assistant turn, a turn over max_turn_chars
    -> regenerate (optional)           assistant turns rewritten by the target (train/data/regeneration.py)
    -> held-out split (seeded)         eval rows + eval prompts for real acceptance measurement
    -> render + tokenise               chat template; loss mask on assistant tokens only
    -> pack or pad                     fixed [N, max_length] int tensors

Every row that is dropped is counted in `TrainData.stats` and in one INFO log line.
"""

from __future__ import annotations

import json
import logging
import pathlib
import random
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.prompts import Prompt
from draftsmith.models.cache_folder import cache_dir
from draftsmith.train.config import DataConfig
from draftsmith.train.data import corpora, regenerated_file
from draftsmith.train.data.corpora import SHAREGPT_ROLES
from draftsmith.train.data.regeneration import regenerate

log = logging.getLogger(__name__)

LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
MAX_EVAL_PROMPTS = 32
TEXT_PROMPT_TOKENS = 64
TOKENIZE_CHUNK = 256  # rows per fast-tokenizer batch call


@dataclass
class TrainData:
    train: torch.utils.data.Dataset
    eval: torch.utils.data.Dataset
    eval_prompts: list[Prompt]
    stats: dict[str, int] = field(default_factory=dict)


class TokenRows(torch.utils.data.Dataset):
    """Fixed-length rows kept as three [N, L] tensors (int32 ids, uint8 masks), not Python lists.
    `loss_mask[t] = 1` marks token t as a training target (predicted from the tokens before it).
    Items also carry their index, "row": the key of a row's cached target features."""

    def __init__(self, input_ids: torch.Tensor, loss_mask: torch.Tensor, attention_mask: torch.Tensor):
        self.input_ids, self.loss_mask, self.attention_mask = input_ids, loss_mask, attention_mask

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {k: getattr(self, k)[i].long() for k in ("input_ids", "loss_mask", "attention_mask")}
        return item | {"row": torch.tensor(int(i))}


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    """Stack equal-length items into [B, L] tensors (rows are already max_length)."""
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


# --- Loading -------------------------------------------------------------------------------------


def load_rows(cfg: DataConfig) -> tuple[list[dict], str]:
    """Raw rows (`{"messages": [...]}` or `{"text": str}`, at most `cfg.max_rows`) and their format."""
    rows, fmt, _ = _load(cfg)
    return rows, fmt


def _load(cfg: DataConfig) -> tuple[list[dict], str, dict[str, int]]:
    """Rows, format, and counts of what the loader itself skipped (stdlib's non-UTF-8 files)."""
    builtin = {"chitchat": "chat", "sharegpt": "chat", "stdlib": "text"}.get(cfg.path)
    if builtin and cfg.format not in ("auto", builtin):
        raise DraftsmithError(f"dataset {cfg.path!r} is {builtin} data; data.format={cfg.format} does not apply to it")
    if cfg.path == "chitchat":
        return corpora.load_chitchat(cfg.max_rows), "chat", {}
    if cfg.path == "sharegpt":
        stats = defaultdict(int)
        return corpora.load_sharegpt(corpora.sharegpt_file(), cfg.max_rows, stats), "chat", stats
    if cfg.path == "stdlib":
        rows, not_utf8 = corpora.load_stdlib(cfg.max_rows)
        return rows, "text", {"skipped_not_utf8": not_utf8}
    ds = _open_dataset(cfg)
    if cfg.max_rows is not None:
        ds = ds.select(range(min(cfg.max_rows, len(ds))))
    fmt = _pick_format(cfg, ds.column_names)
    key, column = ("messages", cfg.messages_column) if fmt == "chat" else ("text", cfg.text_column)
    try:
        return [{key: value} for value in list(ds[column])], fmt, {}  # datasets 5.x: a Column object
    except UnicodeDecodeError as e:  # Arrow's json reader takes bytes that are not UTF-8; reading them fails
        local = pathlib.Path(cfg.path).expanduser()
        problem = _json_problem(local) if LOCAL_SUFFIXES.get(local.suffix.lower()) == "json" else None
        raise DraftsmithError(
            f"data file {cfg.path}: {problem}"
            if problem
            else f"dataset {cfg.path!r}: text that is not UTF-8 ({e.reason} at byte {e.start})"
        ) from None


def _open_dataset(cfg: DataConfig):
    """A local .json/.jsonl/.parquet file, or a `datasets` hub id; load failures as one line."""
    import datasets  # slow to import: only when a dataset is really asked for

    local = pathlib.Path(cfg.path).expanduser()
    builder = LOCAL_SUFFIXES.get(local.suffix.lower())
    if builder and not local.is_file():
        raise DraftsmithError(f"data file not found: {cfg.path}")
    # The json builder logs its own ERROR line for a bad file: the error we raise says it better.
    builder_log = logging.getLogger("datasets.packaged_modules.json.json")
    level = builder_log.level
    builder_log.setLevel(logging.CRITICAL)
    try:
        if builder:
            # Arrow conversions of local files go to our cache, not the user's HF cache.
            return datasets.load_dataset(
                builder, data_files=str(local), split="train", cache_dir=str(cache_dir() / "datasets")
            )
        return datasets.load_dataset(cfg.path, cfg.name, split=cfg.split)
    except Exception as e:  # offline, unknown id, bad config or split, unreadable file
        problem = _json_problem(local) if builder == "json" else None
        if problem:  # datasets says "StopIteration" or "An error occurred": name the file and line
            raise DraftsmithError(f"data file {cfg.path}: {problem}") from None
        if type(e).__name__ == "DatasetGenerationError" and e.__cause__ is not None:
            e = e.__cause__  # "An error occurred while generating the dataset" says nothing
        why = (str(e).strip().splitlines() or [""])[0][:200]
        raise DraftsmithError(
            f"dataset {cfg.path!r} could not be loaded: {type(e).__name__}: {why}; "
            f"local alternatives: a .jsonl/.parquet file, sharegpt, chitchat or stdlib"
        ) from None
    finally:
        builder_log.setLevel(level)


def _json_problem(path: pathlib.Path) -> str | None:
    """What is wrong with a .json/.jsonl file that datasets refused (lines counted from 1), or
    None if it reads as JSON lines or as one JSON document."""
    first = None
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if b"\0" in line:
                return f"line {number} holds binary data (a NUL byte), not JSON text"
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"line {number} is not UTF-8 text (byte {e.start + 1}): a binary file?"
            if first is None and text.strip():
                try:
                    json.loads(text.rstrip("\r\n"))
                except ValueError as e:
                    first = f"line {number} is not valid JSON: {e.msg} (column {e.pos + 1})"
    if path.stat().st_size == 0 or first is None and not path.read_text(encoding="utf-8").strip():
        return "the file is empty"
    if first and path.suffix.lower() == ".json":  # maybe one JSON document over many lines
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return None
        except ValueError as e:
            if path.read_text(encoding="utf-8").lstrip()[:1] in "[{" and e.lineno > 1:
                return f"line {e.lineno} is not valid JSON: {e.msg} (column {e.colno})"
    return first


def _pick_format(cfg: DataConfig, columns: list[str]) -> str:
    """`auto`: chat if the messages column exists, else text if the text column does."""
    wanted = {"chat": [cfg.messages_column], "text": [cfg.text_column]}.get(
        cfg.format, [cfg.messages_column, cfg.text_column]
    )
    for column in wanted:
        if column in columns:
            return "chat" if column == cfg.messages_column else "text"
    looked = " or ".join(repr(c) for c in wanted)
    raise DraftsmithError(
        f"dataset {cfg.path!r} has no column {looked} (data.format={cfg.format}); "
        f"its columns: {', '.join(columns)}; set data.messages_column or data.text_column"
    )


# --- Filtering and the held-out split ------------------------------------------------------------


def _normalize(messages, where: str) -> list[dict]:
    """{"role","content"} dicts; ShareGPT {"from","value"} mapped (human/gpt/system). Keys may
    be present as None: Arrow gives every message of a column the union of their fields."""
    out = []
    for m in messages or []:
        role = (m.get("role") or SHAREGPT_ROLES.get(m.get("from"), m.get("from"))) if isinstance(m, dict) else None
        content = next((m[k] for k in ("content", "value") if m.get(k) is not None), "") if role else None
        if not isinstance(role, str) or not isinstance(content, str):
            raise DraftsmithError(
                f"{where}: a message must have a string 'role'/'content' or 'from'/'value'; got {str(m)[:80]!r}"
            )
        out.append({"role": role, "content": content})
    return out


def _filter(rows: list[dict], fmt: str, cfg: DataConfig, stats: dict[str, int]) -> list[dict]:
    """Usable rows, each tagged with its position in `rows` (a stable id for caching and seeds)."""
    kept = []
    for index, row in enumerate(rows):
        if fmt == "text":
            reason = None if isinstance(row["text"], str) and row["text"].strip() else "skipped_empty"
            item = {"index": index, "text": row["text"]}
        else:
            messages = _normalize(row["messages"], f"dataset {cfg.path!r} row {index}")
            reason = _chat_problem(messages, cfg.max_turn_chars)
            item = {"index": index, "messages": messages}
        if reason:
            stats[reason] += 1
        else:
            kept.append(item)
    return kept


def _chat_problem(messages: list[dict], max_turn_chars: int) -> str | None:
    """Why a chat cannot be trained on (the stats key to count it under), or None."""
    if not any(m["content"].strip() for m in messages):
        return "skipped_empty"
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        return "skipped_no_assistant"
    if any(len(m["content"]) > max_turn_chars for m in messages):
        return "skipped_too_long"
    return None


def _split(rows: list[dict], cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    """Seeded shuffle; hold out min(eval_rows, n // 10) rows (at least 1), keep at least 1 for training."""
    if len(rows) < 2:
        raise DraftsmithError(
            f"dataset {cfg.path!r} has {len(rows)} usable row(s) after filtering; "
            f"need at least 2 (one to train on, one held out)"
        )
    shuffled = list(rows)
    random.Random(cfg.seed).shuffle(shuffled)
    n_eval = min(cfg.eval_rows, max(1, len(rows) // 10))
    return shuffled[n_eval:], shuffled[:n_eval]


# --- Rendering and tokenising --------------------------------------------------------------------


class _ChatSpans:
    """Renders chats with the tokenizer's template and finds the character spans to train on.

    Assistant turn i starts where `messages[:i]` + generation prompt ends and stops where
    `messages[:i+1]` ends, minus trailing whitespace: content + end-of-turn text (`<|im_end|>`),
    as transformers' `{% generation %}` blocks mark it (the newline after it is never generated).
    Rendering every prefix works for any template but is quadratic in turns (chitchat: 8 min),
    so each chat is first laid out from per-role probes (the text around a placeholder content,
    rendered once); the layout is used only if it reproduces the rendered chat exactly.
    """

    PLACEHOLDER = "\x00draftsmith-content\x00"

    def __init__(self, tokenizer, template: dict | None = None):
        self.tokenizer, self.template = tokenizer, template or {}
        self.layouts: dict[tuple[str, str], tuple[str, str, str] | None] = {}

    def render(self, messages: list[dict], gen: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False, **self.template)

    def __call__(self, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
        full = self.render(messages)
        spans = self._laid_out(messages, full)
        return full, spans if spans is not None else self._prefixes(messages, full)

    def _prefixes(self, messages: list[dict], full: str) -> list[tuple[int, int]]:
        spans = []
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                head, turn = self.render(messages[:i], True), self.render(messages[: i + 1])
                if not (full.startswith(head) and full.startswith(turn) and len(head) <= len(turn)):
                    raise _TemplateMismatch
                spans.append((len(head), max(len(head), len(turn.rstrip()))))
        return spans

    def _laid_out(self, messages: list[dict], full: str) -> list[tuple[int, int]] | None:
        first = self.render(messages[:1])
        if messages[0]["role"] == "assistant" or not full.startswith(first):
            return None
        spans, end = [], len(first)
        for prev, m in zip(messages, messages[1:]):
            layout = self._layout(prev["role"], m["role"])
            if layout is None:
                return None
            before, after, gen = layout
            piece = before + m["content"] + after
            if not full.startswith(piece, end) or (m["role"] == "assistant" and not full.startswith(gen, end)):
                return None
            if m["role"] == "assistant":
                spans.append((end + len(gen), max(end + len(gen), end + len(piece.rstrip()))))
            end += len(piece)
        return spans if end == len(full) else None

    def _layout(self, prev_role: str, role: str) -> tuple[str, str, str] | None:
        """(before, after) the content of a `role` message after a `prev_role` one, and the
        generation prompt after a `prev_role` message; None if the template does not allow it."""
        if (prev_role, role) not in self.layouts:
            base = [{"role": prev_role, "content": "x"}]
            try:
                head, gen = self.render(base), self.render(base, True)
                piece = self.render(base + [{"role": role, "content": self.PLACEHOLDER}])
            except Exception:  # templates may refuse some role orders; prefixes will tell
                piece = None
            ok = piece is not None and piece.startswith(head) and gen.startswith(head)
            ok = ok and piece.count(self.PLACEHOLDER) == 1
            parts = piece[len(head) :].split(self.PLACEHOLDER) if ok else None
            self.layouts[(prev_role, role)] = (*parts, gen[len(head) :]) if ok else None
        return self.layouts[(prev_role, role)]


class _TemplateMismatch(Exception):
    """A rendered prefix is not a prefix of the whole rendered chat."""


def _encode(
    rows: list[dict], fmt: str, tokenizer, stats: dict[str, int], bar, template: dict | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(int32 ids, uint8 loss mask) per row. Chats: the rendered template, character spans
    mapped to tokens through the offsets mapping (a token overlapping a span is trained).
    Text: the text's tokens + EOS, all trained. Batched: the fast tokenizer runs in Rust."""
    if fmt == "chat":
        texts, spans, chat_spans = [], [], _ChatSpans(tokenizer, template)
        for row in rows:
            try:
                text, row_spans = chat_spans(row["messages"])
            except _TemplateMismatch:
                stats["skipped_template"] += 1
                continue
            texts.append(text)
            spans.append(row_spans)
    else:
        texts, eos = [row["text"] for row in rows], _token_id(tokenizer, "eos")
    out = []
    for lo in range(0, len(texts), TOKENIZE_CHUNK):
        enc = tokenizer(
            texts[lo : lo + TOKENIZE_CHUNK],
            add_special_tokens=False,
            return_offsets_mapping=fmt == "chat",
            verbose=False,
        )
        for j, ids in enumerate(enc["input_ids"]):
            if fmt == "text":
                out.append((np.asarray([*ids, eos], dtype=np.int32), np.ones(len(ids) + 1, dtype=np.uint8)))
                continue
            offsets, mask = np.asarray(enc["offset_mapping"][j]).reshape(-1, 2), np.zeros(len(ids), dtype=np.uint8)
            for s, e in spans[lo + j]:
                mask[(offsets[:, 0] < e) & (offsets[:, 1] > s)] = 1
            out.append((np.asarray(ids, dtype=np.int32), mask))
        bar.update(len(enc["input_ids"]))
    return out


def _token_id(tokenizer, which: str) -> int:
    """The EOS id, or the pad id (falling back to EOS)."""
    value = tokenizer.pad_token_id if which == "pad" else None
    value = tokenizer.eos_token_id if value is None else value
    if value is None:
        raise DraftsmithError(f"the tokenizer has no {which} token (nor an EOS token); training data needs one")
    return int(value)


# --- Fixed-length rows ---------------------------------------------------------------------------


def _pack(seqs: list[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int, stats: dict, split: str) -> TokenRows:
    """Concatenate rows (masks along) and cut full rows of `length`; the tail remainder is
    dropped (as `group_texts` in transformers' run_clm example) unless no full row exists."""
    ids = np.concatenate([s[0] for s in seqs]) if seqs else np.zeros(0, np.int32)
    mask = np.concatenate([s[1] for s in seqs]) if seqs else np.zeros(0, np.uint8)
    n = len(ids) // length
    if n == 0:  # too little data for one full row: keep it as one padded row rather than nothing
        return _pad([(ids, mask)], length, pad_id, stats, split)
    stats[f"{split}_tail_tokens_dropped"] += len(ids) - n * length
    ids, mask = ids[: n * length].reshape(n, length), mask[: n * length].reshape(n, length)
    return _rows(ids, mask, np.ones_like(mask), stats, split)


def _pad(seqs: list[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int, stats: dict, split: str) -> TokenRows:
    """Truncate each row to `length` and right-pad (attention and loss mask 0 on padding)."""
    ids = np.full((len(seqs), length), pad_id, dtype=np.int32)
    mask = np.zeros((len(seqs), length), dtype=np.uint8)
    attention = np.zeros((len(seqs), length), dtype=np.uint8)
    for r, (s_ids, s_mask) in enumerate(seqs):
        n = min(len(s_ids), length)
        stats[f"{split}_truncated_tokens"] += len(s_ids) - n
        ids[r, :n], mask[r, :n], attention[r, :n] = s_ids[:n], s_mask[:n], 1
    return _rows(ids, mask, attention, stats, split)


def _rows(ids: np.ndarray, mask: np.ndarray, attention: np.ndarray, stats: dict, split: str) -> TokenRows:
    """Drop rows with nothing to learn (all-zero loss mask) and count what remains."""
    keep = mask.any(axis=1)
    stats[f"{split}_dropped_no_loss"] += int((~keep).sum())
    rows = TokenRows(*(torch.from_numpy(np.ascontiguousarray(a[keep])) for a in (ids, mask, attention)))
    stats[f"{split}_examples"] = len(rows)
    stats[f"{split}_tokens"] = int(rows.attention_mask.sum())
    stats[f"{split}_loss_tokens"] = int(rows.loss_mask.sum())
    return rows


# --- Held-out prompts ----------------------------------------------------------------------------


def _eval_prompts(rows: list[dict], fmt: str, tokenizer, domain: str, template: dict | None = None) -> list[Prompt]:
    """Chats: the turns before the first assistant reply, with a generation prompt. Text: the
    first 64 tokens. At most 32, from held-out rows only (the drafter never trained on them)."""
    prompts = []
    for row in rows[:MAX_EVAL_PROMPTS]:
        if fmt == "chat":
            first = next(i for i, m in enumerate(row["messages"]) if m["role"] == "assistant")
            text = tokenizer.apply_chat_template(
                row["messages"][:first], add_generation_prompt=True, tokenize=False, **(template or {})
            )
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(row["text"], add_special_tokens=False)["input_ids"][:TEXT_PROMPT_TOKENS]
            text = tokenizer.decode(ids)
        prompts.append(Prompt(list(ids), text, domain))
    return prompts


CODE_CORPORA = ("stdlib",)  # corpora whose held-out rows are code; the rest count as chat


def mix_domains(held_out: list[Prompt], tokenizer, path: str, template: dict | None = None) -> list[Prompt]:
    """The acceptance prompts: held-out rows interleaved one for one with the built-in prompt set
    of the other domain (code for a chat corpus, chat for a code corpus), so the first N measured
    cover both. A draft tuned on chat alone can lose on code, and the best-τ checkpoint is
    chosen on these. Without a chat template the built-in chats cannot be rendered: held-out only."""
    if getattr(tokenizer, "chat_template", None) is None:
        return held_out
    from draftsmith.evaluation.prompts import load_prompts

    rendering = _Templated(tokenizer, template) if template else tokenizer
    other = load_prompts("chat" if path in CODE_CORPORA else "code", rendering, limit=max(len(held_out), 1))
    mixed = [p for pair in zip(held_out, other) for p in pair]
    n = min(len(held_out), len(other))
    return mixed + held_out[n:] + other[n:]


class _Templated:
    """A tokenizer whose chat template always gets the recipe's switches (data.chat_template_kwargs)."""

    def __init__(self, tokenizer, template: dict):
        self._tokenizer, self._template = tokenizer, template

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        return self._tokenizer.apply_chat_template(*args, **{**self._template, **kwargs})


# --- Entry point ---------------------------------------------------------------------------------


def build_data(cfg: DataConfig, tokenizer, target=None, progress: bool = True) -> TrainData:
    """Training and held-out rows of `cfg.max_length` tokens, held-out prompts, and counts."""
    saved = regenerated_file.saved_path(cfg)
    if cfg.regenerate and target is None and cfg.regenerate_with != "endpoint" and not (saved and saved.is_file()):
        raise DraftsmithError("data.regenerate needs the target model: pass target= to build_data")
    raw, fmt, loader_stats = _load(cfg)
    if fmt == "chat" and getattr(tokenizer, "chat_template", None) is None:
        raise DraftsmithError(f"dataset {cfg.path!r} is chat data but the tokenizer has no chat template")
    if cfg.regenerate and fmt != "chat":
        raise DraftsmithError(f"data.regenerate needs chat data; dataset {cfg.path!r} is text")
    stats = _counter(fmt, rows_read=len(raw), **loader_stats)
    rows = _filter(raw, fmt, cfg, stats)
    stats["rows_used"] = len(rows)
    log.info("data %s: read %d rows, using %d; %s", cfg.path, len(raw), len(rows), _brief(stats, "skipped_"))
    if cfg.regenerate:  # user turns stay as they were, so held-out prompts are the originals'
        rows, regen_stats = _regenerated(rows, cfg, tokenizer, target, progress)
        stats.update(regen_stats)
    train_rows, eval_rows = _split(rows, cfg)
    stats["train_rows"], stats["eval_rows"] = len(train_rows), len(eval_rows)
    train = _tokenized(train_rows, fmt, tokenizer, cfg, stats, "train", progress)
    evaluation = _tokenized(eval_rows, fmt, tokenizer, cfg, stats, "eval", progress)
    if stats.get("skipped_template"):
        log.warning(
            "data %s: %d chats skipped: the chat template renders their prefixes differently from the whole chat",
            cfg.path,
            stats["skipped_template"],
        )
    if len(train) == 0:
        raise DraftsmithError(f"dataset {cfg.path!r}: no training rows left after tokenising ({_brief(stats)})")
    log.info("data %s: %s", cfg.path, _brief(stats))
    held_out = _eval_prompts(eval_rows, fmt, tokenizer, cfg.path, cfg.chat_template_kwargs)
    prompts = mix_domains(held_out, tokenizer, cfg.path, cfg.chat_template_kwargs)
    return TrainData(train, evaluation, prompts, dict(stats))


def _regenerated(rows: list[dict], cfg: DataConfig, tokenizer, target, progress: bool) -> tuple[list[dict], dict]:
    """The rows with the target's replies: from data.regenerated_path when it exists, else regenerated
    (and written there when it is set)."""
    saved = regenerated_file.saved_path(cfg)
    if saved is not None and saved.is_file():
        return regenerated_file.read_into(rows, saved)
    if cfg.regenerate_with == "endpoint" and not (cfg.regenerate_endpoint and cfg.regenerate_model):
        raise DraftsmithError(
            f"data.regenerated_path {saved} does not exist: regenerate first, e.g. draftsmith train RECIPE "
            "--data-only --data.regenerate_endpoint=http://127.0.0.1:8000/v1 --data.regenerate_model=NAME"
        )
    rows, counts = regenerate(rows, cfg, tokenizer, target, progress)
    if saved is not None:
        regenerated_file.write(rows, saved)
    return rows, counts


def _tokenized(
    rows: list[dict], fmt: str, tokenizer, cfg: DataConfig, stats: dict, split: str, progress: bool
) -> TokenRows:
    """One split as fixed-length rows (packed or padded)."""
    with tqdm(total=len(rows), desc=f"tokenising {split}", unit="row", disable=not progress) as bar:
        seqs = _encode(rows, fmt, tokenizer, stats, bar, cfg.chat_template_kwargs)
    if rows and not seqs:
        raise DraftsmithError(
            f"dataset {cfg.path!r}: the chat template renders a chat's prefixes differently "
            f"from the whole chat, so assistant turns cannot be located"
        )
    return (_pack if cfg.pack else _pad)(seqs, cfg.max_length, _token_id(tokenizer, "pad"), stats, split)


def _counter(fmt: str, **initial: int) -> dict[str, int]:
    """Counts that are always reported (zeros included); others appear when they happen."""
    skips = ("skipped_empty", "skipped_no_assistant", "skipped_too_long") if fmt == "chat" else ("skipped_empty",)
    return defaultdict(int, {**initial, **dict.fromkeys(skips, 0)})


def _brief(stats: dict[str, int], prefix: str = "") -> str:
    return ", ".join(f"{k} {v}" for k, v in stats.items() if k.startswith(prefix))
