"""Regenerated data that reaches training: one run regenerates through a served target into
`data.regenerated_path`; training with the recipe as it is (no regeneration overrides) finds those
replies; replies may be as long as a training row; the recipe's chat-template switches reach both
the regeneration prompts and the training rows."""

import json

import pytest
import transformers
import yaml
from test_regenerate import StandIn, chat, reply_for

import draftsmith.train.data as data_mod
from draftsmith.errors import DraftsmithError
from draftsmith.models.sources import load_tokenizer
from draftsmith.train.__main__ import main as train_main
from draftsmith.train.config import DataConfig, load_recipe

SWITCHES = {"enable_thinking": False}


def write_recipe(tmp_path) -> str:
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps({"messages": chat(i, turns=2)}) + "\n" for i in range(12)))
    recipe = {
        "model": {"target": "tiny-random"},
        "drafter": {"kind": "draft_lm", "init": "truncated:2"},
        "data": {
            "path": str(chats),
            "source": "regenerated",
            "regenerate_with": "endpoint",
            "regenerate_model": "served-model",
            "regenerated_path": str(tmp_path / "regenerated.jsonl"),
            "chat_template_kwargs": SWITCHES,
            "max_length": 256,
            "pack": False,
            "eval_rows": 2,
        },
        "optim": {"max_steps": 2, "batch_size": 2, "warmup_steps": 0},
        "checkpoint": {"output_dir": str(tmp_path / "run"), "save_every": 0},
        "logging": {"log_every": 1, "eval_every": 0, "acceptance_prompts": 0, "progress": False},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.fixture
def template_calls(monkeypatch):
    """The keyword arguments of every chat-template rendering."""
    calls, real = [], transformers.PreTrainedTokenizerBase.apply_chat_template

    def recorded(self, *args, **kwargs):
        calls.append(kwargs)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "apply_chat_template", recorded)
    return calls


def test_regenerate_then_train_on_exactly_those_replies(tmp_path, tiny_cache, monkeypatch, template_calls):
    recipe = write_recipe(tmp_path)
    server = StandIn()
    try:
        assert train_main([recipe, "--data-only", f"--data.regenerate_endpoint={server.url}"]) == 0
    finally:
        server.close()
    bodies = [body for _, body in server.requests]
    assert bodies and all(b["chat_template_kwargs"] == SWITCHES for b in bodies)
    assert all(b["max_tokens"] == 256 for b in bodies)  # a reply may fill a training row
    saved = [json.loads(line) for line in (tmp_path / "regenerated.jsonl").read_text().splitlines()]
    assert len(saved) == 12
    replies = [m["content"] for s in saved for m in s["messages"] if m["role"] == "assistant"]
    assert all(r.startswith("R") for r in replies) and not any(r.startswith("answer") for r in replies)

    built = []

    def spy(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    real = data_mod.build_data
    monkeypatch.setattr(data_mod, "build_data", spy)
    template_calls.clear()
    assert train_main([recipe]) == 0  # the server is gone and no override names it
    (data,) = built
    assert data.stats["regenerated_from_file"] == 12 and data.stats["regenerated_rows"] == 12
    tok = load_tokenizer("tiny-random")
    trained = [tok.decode(row[mask.bool()]) for row, mask in zip(data.train.input_ids, data.train.loss_mask)]
    by_index = {s["index"]: s["messages"] for s in saved}
    expected = {reply_for(m[:i]) for m in by_index.values() for i, x in enumerate(m) if x["role"] == "assistant"}
    found = {r for r in expected if any(r in t for t in trained)}
    assert len(found) == len(expected) - 2 and data.stats["train_truncated_tokens"] == 0  # one row held out
    assert not any("answer" in t for t in trained)
    assert template_calls and all(c.get("enable_thinking") is False for c in template_calls)


def test_a_server_that_answers_no_content_writes_no_file(tmp_path, tiny_cache, capsys):
    """vLLM under a reasoning parser answers "content": null for a reply that is all reasoning: the
    run stops with one line naming the likely cause, and no file of empty replies is left to train on."""
    recipe = write_recipe(tmp_path)
    server = StandIn()
    server.content = lambda messages: None
    try:
        code = train_main([recipe, "--data-only", f"--data.regenerate_endpoint={server.url}"])
    finally:
        server.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and not (tmp_path / "regenerated.jsonl").exists()
    assert "returned no content for 10 of 10 chats: a reasoning parser or tool-call reply?" in err[-1]
    assert "serve without --reasoning-parser" in err[-1] and "Traceback" not in "\n".join(err)


def test_an_empty_regenerated_file_is_not_trusted(tmp_path, tiny_cache):
    recipe = load_recipe(write_recipe(tmp_path), [])
    (tmp_path / "regenerated.jsonl").write_bytes(b"")
    with pytest.raises(DraftsmithError, match="regenerated.jsonl holds no chats: delete it to regenerate"):
        data_mod.build_data(recipe.data, load_tokenizer("tiny-random"), progress=False)


def test_training_without_the_file_says_how_to_make_it(tmp_path, tiny_cache):
    recipe = load_recipe(write_recipe(tmp_path), [])
    with pytest.raises(DraftsmithError, match="regenerate first"):
        data_mod.build_data(recipe.data, load_tokenizer("tiny-random"), progress=False)


def test_reply_length_follows_the_row_length():
    assert DataConfig(max_length=2048).max_new_tokens() == 2048
    assert DataConfig(max_length=2048, regenerate_max_new_tokens=300).max_new_tokens() == 300


def test_template_switches_from_the_command_line(tmp_path, tiny_cache):
    recipe = load_recipe(write_recipe(tmp_path), ["--data.chat_template_kwargs.enable_thinking=true"])
    assert recipe.data.chat_template_kwargs == {"enable_thinking": True}
    with pytest.raises(DraftsmithError, match="chat_template_kwargs"):
        load_recipe(write_recipe(tmp_path), ["--data.chat_template_kwargs=off"])


@pytest.mark.parametrize(
    "name",
    [
        "llama-3.1-8b-instruct/eagle3.yaml",
        "llama-3.1-8b-instruct/dflash.yaml",
        "llama-3.1-8b-instruct/draft_lm.yaml",
        "llama-3.1-8b-instruct/medusa.yaml",
        "qwen3-8b/eagle3.yaml",
        "qwen3-8b/dflash.yaml",
        "llama-3.3-70b-instruct/eagle3.yaml",
    ],
)
def test_gpu_recipes_train_on_their_regenerated_file(name):
    """The page's one regeneration command (only the server's URL) fills the file the recipe trains on."""
    d = load_recipe(f"configs/{name}", []).data
    assert d.source == "regenerated" and d.regenerate_with == "endpoint" and d.regenerated_path
    assert d.max_new_tokens() == d.max_length
    assert d.chat_template_kwargs == ({"enable_thinking": False} if name.startswith("qwen3") else {})
    page = open("docs/your-target.md").read()
    assert "--data-only --data.regenerate_endpoint http://127.0.0.1:8000/v1\n" in page
