"""serve-bench's requests: the prompt sets as chat messages by category (MT-Bench first turns,
HumanEval, the built-in sets, a SPEED-Bench-layout file), a long-context category, the chat
template's switches every request carries, and the thinking switch as rows of its own."""

from __future__ import annotations

import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.serve_load import Request


def _file_rows(path: pathlib.Path) -> list[Request]:
    """A SPEED-Bench-layout file: one JSON object a line with `category` and `turns` (the first is
    sent), `messages` or `prompt`/`question`; `domain` stands in for a missing category."""
    from draftsmith.evaluation.prompts import json_objects

    out = []
    for lineno, row in json_objects(path):
        cat = str(row.get("category") or row.get("domain") or path.stem)
        if isinstance(row.get("messages"), list):
            messages = [m for m in row["messages"] if m.get("role") != "assistant"][:2]
        elif isinstance(row.get("turns"), list) and row["turns"]:
            messages = [{"role": "user", "content": str(row["turns"][0])}]
        elif isinstance(row.get("prompt") or row.get("question"), str):
            messages = [{"role": "user", "content": row.get("prompt") or row.get("question")}]
        else:
            raise DraftsmithError(f"{path}:{lineno}: each line needs `turns`, `messages` or `prompt`")
        out.append(Request(cat, messages))
    if not out:
        raise DraftsmithError(f"{path}: no prompts in it")
    return out


def load_requests(
    spec: str,
    limit: int | None = None,
    categories: str | None = None,
    long_context: int = 0,
    thinking: list[str] | None = None,
    template_kwargs: dict | None = None,
) -> dict[str, list[Request]]:
    """category -> its prompts (as chat messages), in the sets' order, each carrying the chat
    template's switches `template_kwargs` (the checkpoint's or the flag's); `thinking` sets
    enable_thinking on top of them, one row per setting."""
    from draftsmith.evaluation import prompts as P

    found: dict[str, list[Request]] = {}
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        if name == "mt-bench":
            rows = [Request(r["category"], [{"role": "user", "content": r["turns"][0]}])
                    for r in P.select_mt_bench(P.read_rows("mt-bench"), limit)]  # fmt: skip
        elif name == "humaneval":
            rows = [Request("humaneval", [{"role": "user", "content": r["prompt"]}]) for r in P.read_rows(name)]
        elif name in P.BUILTIN_SETS or pathlib.Path(name).expanduser().is_file():
            path = P._builtin_path(name) if name in P.BUILTIN_SETS else pathlib.Path(name).expanduser()
            rows = _file_rows(path)
        else:
            raise DraftsmithError(
                f"--prompts {name}: not a file; name mt-bench, humaneval, {', '.join(P.BUILTIN_SETS)} or a JSONL file"
            )
        for r in rows[:limit] if name != "mt-bench" else rows:
            found.setdefault(r.category, []).append(r)
    if categories:
        wanted = [c.strip() for c in categories.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in found]
        if unknown:
            raise DraftsmithError(
                f"--categories: unknown category {', '.join(map(repr, unknown))}; these prompts have {', '.join(found)}"
            )
        found = {c: found[c] for c in wanted}
    if long_context:  # asked for by itself: kept whatever --categories picks
        found["long-context"] = long_context_requests(long_context)
    base = dict(template_kwargs or {})
    found = {c: [Request(r.category, r.messages, dict(base) or None) for r in reqs] for c, reqs in found.items()}
    if thinking:
        switch = {"on": True, "off": False}
        bad = [v for v in thinking if v not in switch]
        if bad:
            raise DraftsmithError(f"--thinking: {', '.join(map(repr, bad))}; give on, off or on,off")
        found = {
            f"{c} thinking:{v}": [Request(r.category, r.messages, base | {"enable_thinking": switch[v]}) for r in reqs]
            for c, reqs in found.items()
            for v in thinking
        }
    return found


def long_context_requests(tokens: int, count: int = 4) -> list[Request]:
    """`count` requests, each about `tokens` tokens of the Python standard library's source (~4
    characters a token) followed by a question: where users report acceptance falling."""
    import sysconfig

    files = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    out, i = [], 0
    for _ in range(count):
        text = ""
        while len(text) < 4 * tokens and i < 10 * len(files) + count:
            try:
                text += files[i % len(files)].read_text(encoding="utf-8") + "\n"
            except (OSError, UnicodeDecodeError):
                pass
            i += 1
        question = "Explain briefly what the code above does, module by module."
        out.append(Request("long-context", [{"role": "user", "content": text[: 4 * tokens] + "\n\n" + question}]))
    return out


# --- the sweep ----------------------------------------------------------------------------------------------
