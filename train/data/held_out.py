"""The held-out prompts acceptance is measured on: the first turns of held-out rows, mixed one for
one with the built-in prompts of the other domain."""

from __future__ import annotations

from draftsmith.evaluation.prompts import Prompt

MAX_EVAL_PROMPTS = 32
TEXT_PROMPT_TOKENS = 64


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
