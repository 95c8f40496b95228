"""Thinking mode as trained: a checkpoint records the chat-template switches its recipe trained
with (data.chat_template_kwargs, e.g. Qwen3's enable_thinking: false), and eval and bench render
their prompts with them unless --chat-template-kwargs says otherwise; each says which it used, in
its output and its JSON. serve-bench sends them in every request's chat_template_kwargs, through
either load driver. (crosscheck: tests/test_your_target_walk.py, whose recipe sets them.)"""

import json
import shutil

import pytest
import transformers
from test_serve_bench import StandIn
from test_serve_vllm_bench import fake_vllm  # noqa: F401 (a fixture)
from test_train import QUICK, TINY

from draftsmith.cli import main as cli
from draftsmith.errors import DraftsmithError
from draftsmith.evaluation.prompts import chosen_template
from draftsmith.train.config import load_recipe

OFF = {"enable_thinking": False}


@pytest.fixture
def renders(monkeypatch):
    """The keyword arguments of every chat-template rendering."""
    calls, real = [], transformers.PreTrainedTokenizerBase.apply_chat_template

    def recorded(self, *args, **kwargs):
        calls.append({k: v for k, v in kwargs.items() if k not in ("add_generation_prompt", "tokenize")})
        return real(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "apply_chat_template", recorded)
    return calls


def test_a_checkpoint_records_its_switches(tmp_path, tiny_cache):
    from draftsmith.train.trainer.loop import train

    steps = ["--optim.max_steps=2", "--logging.acceptance_prompts=0", "--checkpoint.save_every=0"]
    recipe = load_recipe(TINY, [*QUICK, *steps, "--data.chat_template_kwargs.enable_thinking=false"])
    recipe.checkpoint.output_dir = str(tmp_path)
    train(recipe)
    assert json.loads((tmp_path / "final" / "drafter.json").read_text())["chat_template_kwargs"] == OFF


@pytest.fixture
def checkpoint(tiny, tmp_path):
    """A tiny EAGLE-3 checkpoint whose drafter.json records thinking off."""
    _, spec, _ = tiny("eagle3")
    folder = tmp_path / "ckpt"
    shutil.copytree(spec, folder)
    meta = json.loads((folder / "drafter.json").read_text())
    (folder / "drafter.json").write_text(json.dumps(meta | {"chat_template_kwargs": OFF}))
    return folder


@pytest.mark.parametrize("command", ["eval", "bench"])
def test_measuring_commands_render_as_trained_unless_told(command, checkpoint, tmp_path, renders, capsys):
    out = tmp_path / "result.json"
    argv = [command, "--target", "tiny-random", "--draft", str(checkpoint), "--prompts", "chat", "--num-prompts", "1"]
    argv += ["--max-new-tokens", "4", "-k", "2", "--quiet", "--json", str(out)]
    argv += ["--dtype", "float32", "--cpu-matmul", "linear", "--draft-dtype", "float32"]  # nothing timed to choose
    argv += ["--no-hf"] if command == "bench" else []
    assert cli(argv) == 0
    assert renders and all(call == OFF for call in renders)
    assert (
        'chat template switches: {"enable_thinking": false} (as the checkpoint was trained)' in capsys.readouterr().out
    )
    result = json.loads(out.read_text())
    assert (result["chat_template_kwargs"], result["chat_template_kwargs_from"]) == (OFF, "checkpoint")

    renders.clear()
    assert cli([*argv, "--chat-template-kwargs", "{}"]) == 0  # told otherwise: no switches
    assert renders and all(call == {} for call in renders)
    assert "chat template switches: none (--chat-template-kwargs)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert (result["chat_template_kwargs"], result["chat_template_kwargs_from"]) == ({}, "--chat-template-kwargs")


def test_the_choice_and_a_bad_flag():
    assert chosen_template(None, {"chat_template_kwargs": OFF}) == (OFF, "checkpoint")
    assert chosen_template(None, {}) == ({}, "none") and chosen_template(None, None) == ({}, "none")
    assert chosen_template('{"enable_thinking": true}', {"chat_template_kwargs": OFF})[0] == {"enable_thinking": True}
    with pytest.raises(DraftsmithError, match="--chat-template-kwargs 'thinking': expected a JSON object"):
        chosen_template("thinking", None)


@pytest.mark.parametrize("driver", ["draftsmith", "vllm"])
def test_serve_bench_sends_the_switches_unless_told(driver, checkpoint, fake_vllm, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A checkpoint trained with thinking off is served with thinking off: every request (ours, or
    `vllm bench serve`'s through --extra-body) carries its switches, unless the flag or --thinking
    says otherwise; the stamp says which, and from where."""
    from draftsmith.shipping import installs

    monkeypatch.setattr(installs, "probe", lambda python: {"vllm": True, "version": "0.32.0", "prefix": None})
    drafted, plain = StandIn(drafted=True), StandIn(drafted=False)
    out = tmp_path / "sb"
    argv = ["serve-bench", str(checkpoint), "--base-url", drafted.url, "--baseline-url", plain.url, "--prompts",
            "chat", "--num-prompts", "1", "--concurrency", "1", "--num-requests", "1", "--warmup", "0",
            "--driver", driver, "--vllm", str(fake_vllm), "--tokenizer", "/models/t",
            "--output-dir", str(out)]  # fmt: skip
    calls = fake_vllm.parent / "calls.jsonl"

    def sent() -> list:
        """The switches of every request since the last call (None: none sent)."""
        if driver == "draftsmith":
            found = [b.get("chat_template_kwargs") for b in drafted.bodies + plain.bodies]
            drafted.bodies.clear(), plain.bodies.clear()
        else:
            found = [json.loads(a[a.index("--extra-body") + 1]).get("chat_template_kwargs")
                     for a in (json.loads(line)["args"] for line in calls.read_text().splitlines())]  # fmt: skip
            calls.unlink()
        assert len(found) == 2  # one level on each server
        return found

    def stamp() -> tuple:
        s = json.loads((out / "results.json").read_text())["stamp"]
        assert s["driver"]["name"] == ("vllm bench serve" if driver == "vllm" else s["driver"]["name"])
        return s["chat_template_kwargs"], s["chat_template_kwargs_from"]

    try:
        assert cli(argv) == 0, capsys.readouterr().err
        assert sent() == [OFF, OFF] and stamp() == (OFF, "checkpoint")
        assert 'chat template switches: {"enable_thinking": false} (as the checkpoint was trained)' in (
            capsys.readouterr().out
        )
        assert cli([*argv, "--chat-template-kwargs", "{}"]) == 0  # told otherwise: no switches
        assert sent() == [None, None] and stamp() == ({}, "--chat-template-kwargs")
        assert "chat template switches: none (--chat-template-kwargs)" in capsys.readouterr().out
        assert cli([*argv, "--thinking", "on"]) == 0  # the documented contract: --thinking sets enable_thinking
        assert sent() == [{"enable_thinking": True}] * 2 and stamp() == (OFF, "checkpoint")
        assert "; enable_thinking per row (--thinking on)" in capsys.readouterr().out
        if driver == "draftsmith":  # the completions API renders no chat template: nothing to send, and says so
            assert cli([*argv, "--api", "completions"]) == 0
            assert sent() == [None, None] and stamp() == ({}, "--api completions")
            assert 'the checkpoint\'s {"enable_thinking": false} cannot be sent' in capsys.readouterr().out
            assert cli([*argv, "--api", "completions", "--chat-template-kwargs", '{"enable_thinking": true}']) == 2
            assert "--chat-template-kwargs switches the chat template: it needs --api chat" in capsys.readouterr().err
    finally:
        drafted.close()
        plain.close()
