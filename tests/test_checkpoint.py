"""models/checkpoint.py: the one reader of a checkpoint folder (drafter.json, run folders, identity).

Folders here are written by hand (drafter.json and a few bytes of weights): no model is loaded.
"""

import json
import logging

import pytest

from draftsmith.errors import DraftsmithError
from draftsmith.models.checkpoint import (
    DRAFTER_META,
    Checkpoint,
    checkpoint_identity,
    read_drafter_meta,
    resolve_checkpoint,
    write_drafter_meta,
)


def _ckpt(folder, kind="eagle", target="tiny-random", **extra):
    folder.mkdir(parents=True, exist_ok=True)
    write_drafter_meta(folder, kind, target, **extra)
    (folder / "model.safetensors").write_bytes(b"weights of " + str(folder).encode())
    return folder


def test_drafter_meta_round_trips_byte_for_byte(tmp_path):
    write_drafter_meta(tmp_path, "medusa", "tiny-random", step=7)
    text = (tmp_path / DRAFTER_META).read_text()
    assert text == json.dumps({"format": 1, "kind": "medusa", "target": "tiny-random", "step": 7}, indent=2) + "\n"
    assert read_drafter_meta(tmp_path)["step"] == 7
    assert [p.name for p in tmp_path.iterdir()] == [DRAFTER_META]  # no temporary file left behind


def test_a_run_folder_is_its_best_then_its_final(tmp_path, caplog):
    run = tmp_path / "run"
    _ckpt(run / "final", step=4)
    caplog.set_level(logging.INFO)
    assert Checkpoint.open(run).path == run / "final"
    assert "is a training run: using its final/ checkpoint" in caplog.text
    _ckpt(run / "best", step=2)
    opened = Checkpoint.open(run)
    assert (opened.path, opened.step, opened.kind, opened.target) == (run / "best", 2, "eagle", "tiny-random")


def test_an_incomplete_best_is_said_before_final_is_taken(tmp_path, caplog):
    run = tmp_path / "run"
    _ckpt(run / "final", step=4)
    (run / "best").mkdir()
    (run / "best" / "config.json").write_text("{}")  # a copy interrupted before drafter.json
    with caplog.at_level(logging.WARNING):
        assert resolve_checkpoint(run, "--draft") == run / "final"
    assert f"--draft {run}: its best/ is incomplete (no drafter.json): using its final/ checkpoint instead" in (
        caplog.text
    )
    caplog.clear()
    (
        run / "final" / DRAFTER_META
    ).unlink()  # neither is whole: open names the incomplete checkpoints instead of guessing
    with pytest.raises(DraftsmithError, match=r"not a draftsmith checkpoint \(no drafter.json\) \(its best/, final/"):
        Checkpoint.open(run)


def test_open_names_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(DraftsmithError, match="no such checkpoint folder"):
        Checkpoint.open(tmp_path / "missing")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DraftsmithError, match="is a file"):
        Checkpoint.open(tmp_path / "afile")
    _ckpt(tmp_path / "many" / "step-1")
    with pytest.raises(DraftsmithError, match="it holds checkpoints"):
        Checkpoint.open(tmp_path / "many")


def test_find_passes_over_model_names_and_refuses_damaged_checkpoints(tmp_path):
    assert Checkpoint.find("smollm2-135m-instruct", "--draft") is None  # a model name: the caller loads it
    assert Checkpoint.find("truncated:2", "--draft") is None
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text(json.dumps({"model_type": "draftsmith_eagle"}))
    with pytest.raises(DraftsmithError, match="a damaged eagle checkpoint: drafter.json is missing"):
        Checkpoint.find(damaged, "--draft")
    assert Checkpoint.find(_ckpt(tmp_path / "ok"), "--draft").path == tmp_path / "ok"


def test_the_target_to_load_and_whether_another_matches(tmp_path, caplog):
    plain = Checkpoint.open(_ckpt(tmp_path / "plain"))
    assert plain.target_to_load() == ("tiny-random", None)
    assert plain.matches_target("tiny-random") and not plain.matches_target("smollm2-135m-instruct")
    # Medusa-2 carries its own fine-tuned target: that is the one to load, and the one that matches
    joint = Checkpoint.open(_ckpt(tmp_path / "joint", "medusa", "tiny-random", target_path="target"))
    (joint.path / "target").mkdir()
    own, note = joint.target_to_load()
    assert own == str(joint.path / "target") and "fine-tuned with the drafter (Medusa-2) from tiny-random" in note
    assert joint.matches_target(own) and not joint.matches_target("tiny-random")
    with caplog.at_level(logging.WARNING):
        assert not joint.check_target("tiny-random", "--target")
    assert f"{joint.path} was trained together with its own target {own}; decoding with --target tiny-random" in (
        caplog.text
    )


def test_identity_follows_drafter_json_and_weights(tmp_path):
    ckpt = _ckpt(tmp_path / "c", step=3)
    first = checkpoint_identity(ckpt)
    assert first == Checkpoint.open(ckpt).identity()
    assert (first["kind"], first["target"], first["step"], first["path"]) == ("eagle", "tiny-random", 3, str(ckpt))
    (ckpt / "model.safetensors").write_bytes(b"other weights")
    assert checkpoint_identity(ckpt)["sha256"] != first["sha256"]
    assert checkpoint_identity(tmp_path / "nothing") is None and checkpoint_identity(None) is None


def test_one_opened_checkpoint_is_handed_on_and_reads_its_config_once(tmp_path, monkeypatch):
    """export and publish take a path or an opened Checkpoint; an opened one is used as it is, and
    its config.json is read once (a corrupt one is one line)."""
    folder = _ckpt(tmp_path / "c")
    (folder / "config.json").write_text(json.dumps({"target": "from-config", "vocab_size": 8}))
    (folder / "tokenizer.json").write_text("{}")
    opened = Checkpoint.open(folder)
    assert Checkpoint.of(opened) is opened and Checkpoint.of(folder) == opened
    reads = []
    real = type(folder).read_text
    monkeypatch.setattr(type(folder), "read_text", lambda self, *a, **k: reads.append(self.name) or real(self, *a, **k))
    assert opened.config["vocab_size"] == 8 and opened.config["vocab_size"] == 8
    assert reads == ["config.json"]
    assert opened.target_name == "tiny-random" and opened.tokenizer_files() == [folder / "tokenizer.json"]
    monkeypatch.undo()
    real_hash, hashed = Checkpoint._hash, []
    monkeypatch.setattr(Checkpoint, "_hash", lambda self: hashed.append(1) or real_hash(self))
    assert opened.identity() == opened.identity() == checkpoint_identity(folder) and len(hashed) == 2  # once each
    monkeypatch.undo()
    bad = _ckpt(tmp_path / "bad")
    (bad / "config.json").write_text("{not json")
    with pytest.raises(DraftsmithError, match="corrupt checkpoint config"):
        Checkpoint.open(bad).config  # noqa: B018


# --- bad checkpoints: one line each ----------------------------------------------------------------


def _meta(folder, **meta):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DRAFTER_META).write_text(json.dumps(meta))
    return folder


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


def test_a_newer_metadata_format_is_refused_naming_the_one_this_version_reads(tmp_path):
    folder = _meta(tmp_path / "c", format=99, kind="eagle", target="tiny-random")
    for read in (Checkpoint.open, lambda p: Checkpoint.find(p, "--draft"), checkpoint_identity):
        with pytest.raises(DraftsmithError) as e:
            read(folder)
        assert "format 99, newer than this draftsmith reads (format 1)" in _one_line(e)


def test_a_target_that_is_not_a_name_is_one_line_not_a_type_error(tmp_path):
    folder = _meta(tmp_path / "c", format=1, kind="eagle", target=[1, 2])
    for read in (Checkpoint.open, lambda p: Checkpoint.find(p, "--draft")):  # export/publish, and eval's --draft
        with pytest.raises(DraftsmithError) as e:
            read(folder)
        assert "'target' [1, 2] is not a model name or path" in _one_line(e)


def test_a_symlink_loop_is_one_line_at_once(tmp_path):
    import time

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    start = time.monotonic()
    for read in (Checkpoint.open, lambda p: Checkpoint.find(p, "--draft")):  # never asks the Hub
        with pytest.raises(DraftsmithError) as e:
            read(loop)
        assert "a loop of symbolic links" in _one_line(e)
    assert time.monotonic() - start < 5


def _draft_lm(folder, **meta):
    """A minimal draft LM checkpoint an hf export takes (a causal LM config and one tensor)."""
    import torch
    from safetensors.torch import save_file

    _meta(folder, format=1, kind="draft_lm", **meta)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8}
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 4, "num_hidden_layers": 1}))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_export_warns_when_drafter_json_names_no_target(tmp_path, caplog):
    from draftsmith.shipping.export import export

    folder = _draft_lm(tmp_path / "c")
    with caplog.at_level(logging.WARNING):
        out = export(folder, "hf", tmp_path / "out", verifier="some/verifier")
    assert "its drafter.json names no target" in caplog.text
    assert json.loads((out / "draftsmith_export.json").read_text())["target"] == ""


SIGTERM_RUN = """
import pathlib, sys, time
from draftsmith.shipping.export import export, hf

ready = pathlib.Path(sys.argv[3])


def slow(ckpt, out, **kw):  # the weights half written when SIGTERM comes
    (out / "model.safetensors").write_bytes(b"half")
    ready.write_text("writing")
    time.sleep(60)


hf.write = slow
export(sys.argv[1], "hf", sys.argv[2], verifier="v")
"""


def test_an_export_killed_by_sigterm_leaves_no_temporary_folder(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    folder = _draft_lm(tmp_path / "c", target="tiny-random")
    (tmp_path / "exports").mkdir()
    out, ready = tmp_path / "exports" / "out", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_RUN, str(folder), str(out), str(ready)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the export never started writing"
        assert [p.name.startswith(".out.export-") for p in (tmp_path / "exports").iterdir()] == [True]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM  # it still dies of SIGTERM
    finally:
        proc.kill()
    assert list((tmp_path / "exports").iterdir()) == []  # no hidden half export, and no export
