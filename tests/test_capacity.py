"""Every trainable kind can learn what it is shown (train/trainer/capacity.py): trained through the
trainer on nothing but the tiny target's greedy replies to a few prompts, its checkpoint decodes
those prompts at the kind's default K with mean_acceptance_length >= 0.8 (K + 1), every output
equal to the target's. Untrained (one step at a negligible learning rate: the kind's own
initialisation) the same check fails, so the bar is the training's doing, not the data's."""

import pytest

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import KINDS
from draftsmith.testing import configs_dir
from draftsmith.train.trainer.capacity import BAR, check_capacity, recipe_for

TRAINABLE = [name for name, kind in KINDS.items() if kind.trainable]
# Short user turns: with the tiny byte-level tokenizer a row is about 20 prompt + 24 reply tokens.
PROMPTS = ["Hi!", "Name a colour.", "What is 2+2?"]
SETTINGS = {"num_prompts": 3, "max_new_tokens": 24, "prompts": PROMPTS}
# Each step trains on all three rows. At 120 steps every kind but DFlash is above its bar (tau 4.3-4.9
# of 5); DFlash, which trains up to 12 sampled blocks per row a step rather than every position,
# reaches 3.2 at 120 and 3.7 (of 4) at 200.
STEPS = 200


def check(tiny_target, kind, folder, **kw):
    return check_capacity(tiny_target, kind, recipe_for(configs_dir(), "tiny", kind), folder, **SETTINGS, **kw)


@pytest.mark.parametrize("kind", TRAINABLE)
def test_a_kind_learns_the_targets_own_replies(kind, tiny_target, tmp_path, fresh_accelerate):
    result = check(tiny_target, kind, tmp_path / "run", steps=STEPS)
    cap = KINDS[kind].default_k
    assert result.num_speculative_tokens <= cap and result.bar == pytest.approx(
        BAR * (result.num_speculative_tokens + 1)
    )
    assert result.outputs_match_target  # lossless: the greedy outputs are the target's replies
    assert result.passed, result.as_dict()


@pytest.mark.parametrize("kind", TRAINABLE)
def test_untrained_the_same_check_fails(kind, tiny_target, tmp_path, fresh_accelerate):
    result = check(tiny_target, kind, tmp_path / "run", steps=1, lr=1e-12)
    assert result.outputs_match_target
    assert not result.passed and result.mean_acceptance_length < result.bar, result.as_dict()


def test_a_kind_with_nothing_to_train_is_one_line(tiny_target, tmp_path):
    untrained = next(name for name, kind in KINDS.items() if not kind.trainable)
    with pytest.raises(DraftsmithError, match="nothing to train"):
        check_capacity(tiny_target, untrained, recipe_for(configs_dir(), "tiny", "eagle"), tmp_path)


def test_the_script_prints_the_table_writes_the_stamped_json_and_fails_below_the_bar(tiny_target, tmp_path):
    """scripts/bench_capacity.py on the tiny target, one kind barely trained: below the bar, so
    status 1, the kind named, and the JSON says so with its stamp."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "capacity.json"
    cmd = [sys.executable, "scripts/bench_capacity.py", "--target", "tiny-random", "--kinds", "draft_lm"]
    cmd += ["--steps", "1", "--lr", "1e-12", "--num-prompts", "2", "--max-new-tokens", "12", "--json", str(out)]
    cmd += ["--set", "drafter.divergence=fkl"]
    proc = subprocess.run(cmd, cwd=root, env=os.environ.copy(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "below the bar: draft_lm" in proc.stderr and "| draft_lm | 4 |" in proc.stdout
    r = json.loads(out.read_text())
    row = r["kinds"]["draft_lm"]
    assert row["steps"] == 1 and not row["passed"] and len(row["per_prompt"]) == 2
    assert row["mean_acceptance_length"] < row["bar"] == pytest.approx(4.0)
    assert r["machine"] and r["commit"] and r["date"] and "bench_capacity.py" in r["command"]
    assert r["settings"]["set"] == ["drafter.divergence=fkl"]


@pytest.mark.parametrize("item", ["divergence=fkl", "drafter.divergence"])
def test_the_scripts_override_must_name_a_section_and_a_value(item, capsys, monkeypatch):
    import pathlib

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
    from bench_capacity import arguments

    with pytest.raises(SystemExit):
        arguments(["--set", item])
    assert "expected SECTION.KEY=VALUE" in capsys.readouterr().err
