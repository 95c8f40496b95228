"""Rows to token ids and loss masks: chats rendered with the chat template, the assistant
turns located as character spans and mapped to tokens; text rows all trained, with EOS."""

from __future__ import annotations

import numpy as np

from draftsmith.errors import DraftsmithError

TOKENIZE_CHUNK = 256  # rows per fast-tokenizer batch call


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
