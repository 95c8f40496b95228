"""Benchmark prompts: a jsonl file, a built-in set, a standard benchmark, or a `datasets` name.

A row holds either `prompt` (plain text, tokenised as is: a completion prompt) or `messages`
(a chat, rendered with the target's chat template and a generation prompt), and optionally
`domain` (bench breaks acceptance down by it). Built-in sets: `chat`, `code` (the quick ones).
Standard benchmarks (infer/prompt_sets.py, from pinned pip packages): `mt-bench` (80 two-turn
questions in 8 categories, the second turn asked after the target's own first answer) and
`humaneval` (164 problems, each prompt the user message). Several sets: `mt-bench,humaneval`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from draftsmith.errors import DraftsmithError

BUILTIN_SETS = ("chat", "code")
_DATASET_COLUMNS = ("messages", "conversations", "prompt", "instruction", "question", "text")


@dataclass
class Prompt:
    ids: list[int]
    text: str
    domain: str  # the category results are split by (an MT-Bench category, "humaneval", a file's domain)
    turn: int | None = None  # MT-Bench: 1 or 2 (results are split by turn too); None: single-turn sets
    qid: str | None = None  # the benchmark's own id ("mt-bench/81", "HumanEval/0"), for error messages
    source: str | None = None  # the set it came from (results are split by set when a run mixes several)


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("draftsmith") / "data" / "prompts" / f"{name}.jsonl"))


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DraftsmithError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or not ("prompt" in row or "messages" in row):
            raise DraftsmithError(f"{path}:{lineno}: each line needs a 'prompt' string or a 'messages' list")
        rows.append(row)
    return rows


def _read_dataset(name: str, split: str) -> list[dict]:
    from .prompt_sets import STANDARD_SETS

    try:
        import datasets

        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # offline, unknown id, missing split: all mean "no such prompt source"
        raise DraftsmithError(
            f"prompts {name!r}: not a file, not a built-in set ({', '.join(BUILTIN_SETS + tuple(STANDARD_SETS))}), "
            f"and `datasets.load_dataset` failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    column = next((c for c in _DATASET_COLUMNS if c in ds.column_names), None)
    if column is None:
        raise DraftsmithError(f"dataset {name!r} has none of the columns {_DATASET_COLUMNS}; it has {ds.column_names}")
    rows = []
    for value in ds[column]:
        if isinstance(value, list):  # a conversation: drop a trailing assistant turn, prompt the reply
            msgs = [{"role": m.get("role", m.get("from")), "content": m.get("content", m.get("value"))} for m in value]
            while msgs and msgs[-1]["role"] in ("assistant", "gpt"):
                msgs.pop()
            if msgs:
                rows.append({"messages": msgs})
        elif isinstance(value, str) and value.strip():
            rows.append({"messages": [{"role": "user", "content": value}]} if column != "text" else {"prompt": value})
    return rows


def render_chat(tokenizer, messages: list[dict], source: str) -> tuple[str, list[int]]:
    """A chat as the target sees it: its chat template with a generation prompt, then token ids
    (the template already holds the special tokens, so none are added)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise DraftsmithError(f"{source!r} has chat 'messages' but the target's tokenizer has no chat template")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text, tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]  # lengths: ContextFit says it in one line


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:  # a slice [:-1] or [:0] would silently mean "all but one" / "all"
        raise DraftsmithError(f"--num-prompts must be >= 1 (got {limit}); leave it out to use every prompt")


class ContextFit:
    """Makes each prompt fit the target's positions: prompt + max_new_tokens + the tokens one
    step may draft must not exceed `max_position_embeddings` (past it a model's numbers mean
    nothing). Refuses with one line, or keeps the prompt's last tokens when `truncate` is set."""

    def __init__(self, max_positions: int | None, max_new_tokens: int, draft_tokens: int = 0, truncate: bool = False,
                 model: str = "the target", truncate_flag: str | None = "--truncate-prompts"):
        self.max_positions, self.max_new_tokens, self.draft_tokens = max_positions, max_new_tokens, draft_tokens
        self.truncate, self.model, self.truncate_flag = truncate, model, truncate_flag

    def __call__(self, p: Prompt, where: str) -> Prompt:
        if not self.max_positions:
            return p
        reserve = self.max_new_tokens + self.draft_tokens
        budget = self.max_positions - reserve
        drafts = f" and {self.draft_tokens} draft tokens" if self.draft_tokens else ""
        if budget < 1:
            raise DraftsmithError(
                f"--max-new-tokens {self.max_new_tokens}{drafts} leave{'s' if not drafts else ''} no room for a prompt in "
                f"{self.model}'s {self.max_positions:,} positions (max_position_embeddings): lower --max-new-tokens")
        if len(p.ids) <= budget:
            return p
        if self.truncate:
            return replace(p, ids=p.ids[-budget:])  # the end holds the question and the generation prompt
        raise DraftsmithError(
            f"prompt {where} has {len(p.ids):,} tokens; with --max-new-tokens {self.max_new_tokens}{drafts} it needs "
            f"{len(p.ids) + reserve:,} positions, but {self.model} has {self.max_positions:,} "
            f"(max_position_embeddings): shorten it" + (f", lower --max-new-tokens, or pass {self.truncate_flag} to keep its last "
                                                         f"{budget:,} tokens" if self.truncate_flag else " or lower --max-new-tokens"))


def describe(p: Prompt, index: int) -> str:
    """How an error names a prompt: its id or position, and its start."""
    head = p.text.replace("\n", " ")[:40]
    return f"{p.qid or f'#{index + 1}'} ({p.domain}: {head!r})"


def load_prompts(source: str, tokenizer, limit: int | None = None, split: str = "test", max_prompt_tokens: int | None = None,
                 *, target=None, max_new_tokens: int = 128, cache_dir=None, progress: bool = False, fit=None) -> list[Prompt]:
    """Tokenised prompts from a jsonl file, a built-in set name, a standard benchmark, or a
    `datasets` name. `limit`: the first N prompts (MT-Bench: N questions, both turns each, spread
    over the categories). `fit(prompt, where)` may refuse or shorten a prompt (ContextFit).
    MT-Bench needs `target` (its second turn follows the target's greedy answer to the first,
    `max_new_tokens` long, cached under `cache_dir`)."""
    from .prompt_sets import STANDARD_SETS, load_standard

    check_limit(limit)
    if source in STANDARD_SETS:
        return load_standard(source, tokenizer, limit, target=target, max_new_tokens=max_new_tokens, cache_dir=cache_dir,
                             progress=progress, fit=fit)
    if source in BUILTIN_SETS:
        rows = _read_jsonl(_builtin_path(source))
    elif Path(source).is_file():
        rows = _read_jsonl(Path(source))
    elif Path(source).suffix in (".jsonl", ".json"):
        raise DraftsmithError(f"prompt file not found: {source}")
    else:
        rows = _read_dataset(source, split)
    if not rows:
        raise DraftsmithError(f"no prompts in {source!r}: the file or dataset is empty")
    prompts = []
    for row in rows[:limit] if limit else rows:
        if "messages" in row:
            text, ids = render_chat(tokenizer, row["messages"], source)
        else:
            text = row["prompt"]
            ids = tokenizer(text, verbose=False)["input_ids"]
        if not ids:
            raise DraftsmithError(f"{source!r}: a prompt tokenises to nothing: {text[:60]!r}")
        if max_prompt_tokens:
            ids = ids[-max_prompt_tokens:]
        p = Prompt(ids, text, row.get("domain", "default"), source=source)
        prompts.append(fit(p, describe(p, len(prompts))) if fit else p)
    return prompts


def split_sets(spec: str) -> list[str]:
    """`mt-bench,humaneval` -> the sets; a path that exists is one source even with a comma."""
    if "," not in spec or Path(spec).exists():
        return [spec]
    names = [s.strip() for s in spec.split(",")]
    if not all(names):
        raise DraftsmithError(f"--prompts {spec!r}: an empty name in the comma list")
    if len(set(names)) != len(names):
        raise DraftsmithError(f"--prompts {spec!r}: a set is named twice")
    return names


def load_prompt_sets(spec: str, tokenizer, limit: int | None = None, split: str = "test", **kwargs) -> list[Prompt]:
    """Several sets, comma-separated: each contributes `limit` prompts (MT-Bench: questions)."""
    return [p for name in split_sets(spec) for p in load_prompts(name, tokenizer, limit, split, **kwargs)]
