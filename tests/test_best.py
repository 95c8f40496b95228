"""best/: the checkpoint with the highest τ measured through the runtime during training (ties: the
later step), kept across a resume; the loss/τ curves PNG; the model card's checkpoint line; the
acceptance prompts keep both domains."""

import importlib.util
import json
import pathlib
import shutil

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.train.config import load_recipe

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny" / "draft_lm.yaml"
QUICK = [
    "--data.max_rows=120",
    "--data.max_length=64",
    "--optim.batch_size=4",
    "--logging.progress=false",
    "--logging.eval_every=1000",
    "--logging.log_every=2",
    "--logging.acceptance_every=2",
    "--logging.acceptance_prompts=2",
    "--checkpoint.save_every=2",
    "--checkpoint.keep_last=10",
]


def scripted_tau(monkeypatch, taus: dict[int, float]) -> list[int]:
    """Trainer.measure_acceptance reports taus[step], a τ or (τ, standard error), 1.0 at an unnamed
    step 0 (recorded as the real one is); -> the steps measured."""
    from draftsmith.train.trainer.loop import Trainer

    measured = []

    def fake(self):
        measured.append(self.step)
        tau = taus.get(self.step, 1.0)  # step 0: before training, unless a test names it
        tau, se = tau if isinstance(tau, tuple) else (tau, None)  # (tau, its standard error)
        self._record({"eval/mean_acceptance_length": tau})
        return {"mean_acceptance_length": tau, "mean_acceptance_length_se": se, "num_prompts": 2}

    monkeypatch.setattr(Trainer, "measure_acceptance", fake)
    return measured


def train(out, *overrides, resume=None):
    from draftsmith.train.trainer.loop import train as run

    return run(load_recipe(TINY, QUICK + [f"--checkpoint.output_dir={out}", *overrides]), resume=resume)


def weights(folder: pathlib.Path) -> dict:
    return load_file(folder / "model.safetensors")


def same_weights(a: pathlib.Path, b: pathlib.Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_best_is_the_highest_tau_and_the_curves_are_drawn(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    measured = scripted_tau(monkeypatch, {2: 1.5, 4: 2.5, 6: 1.8, 8: 1.2})
    tensorboard = importlib.util.find_spec("tensorboard") is not None
    s = train(tmp_path, "--optim.max_steps=8", *(["--logging.trackers=[tensorboard]"] if tensorboard else []))
    assert measured == [0, 2, 4, 6, 8]  # before training, every acceptance_every steps, and the end
    best = tmp_path / "best"
    meta = json.loads((best / "drafter.json").read_text())
    assert meta["step"] == 4 and meta["tau"] == 2.5 and meta["checkpoint"] == "best"
    assert meta["acceptance"]["num_prompts"] == 2 and sum(meta["acceptance"]["domains"].values()) == 2
    # the weights are step 4's, not the last step's
    assert same_weights(best, tmp_path / "step-0000004")
    assert not same_weights(best, tmp_path / "final")
    assert s["best"]["step"] == 4 and s["best"]["tau"] == 2.5
    final = json.loads((tmp_path / "final" / "drafter.json").read_text())
    assert final["checkpoint"] == "final" and final["tau"] == 1.2
    # τ sits in the history beside the losses, with the tokens seen at that step
    from draftsmith.train.trainer.curves import series

    tokens, taus = series(s["history"], "eval/mean_acceptance_length")
    assert taus == [1.0, 1.5, 2.5, 1.8, 1.2] and tokens == sorted(tokens) and tokens[0] == 0 < tokens[1]
    if tensorboard:  # the trackers get τ beside the losses, at the steps it was measured
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(next((tmp_path / "logs").rglob("events.out.tfevents.*")).parent))
        events.Reload()
        assert "train/loss" in events.Tags()["scalars"]
        logged = [(e.step, round(e.value, 3)) for e in events.Scalars("eval/mean_acceptance_length")]
        assert logged == [(0, 1.0), (2, 1.5), (4, 2.5), (6, 1.8), (8, 1.2)]
    png = tmp_path / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    # nothing left half-written
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-"))]


def test_a_tie_takes_the_later_step_and_the_end_of_the_run_counts(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    scripted_tau(monkeypatch, {2: 2.0, 4: 2.0, 6: 3.0})
    train(tmp_path, "--optim.max_steps=6")
    meta = json.loads((tmp_path / "best" / "drafter.json").read_text())
    assert meta["step"] == 6 and meta["tau"] == 3.0  # the end-of-run measurement won
    assert same_weights(tmp_path / "best", tmp_path / "final")

    out = tmp_path / "tie"
    scripted_tau(monkeypatch, {2: 1.0, 4: 2.0, 6: 2.0})
    train(out, "--optim.max_steps=6")
    assert json.loads((out / "best" / "drafter.json").read_text())["step"] == 6


def test_resume_keeps_a_better_best(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    scripted_tau(monkeypatch, {2: 1.5, 4: 3.0, 6: 1.0})
    train(tmp_path, "--optim.max_steps=6")
    before = weights(tmp_path / "best")
    state = json.loads((tmp_path / "step-0000006" / "trainer_state.json").read_text())
    assert state["best"]["step"] == 4 and state["best"]["tau"] == 3.0  # the run state records it
    # a longer run resumed from step 6: its later τ are all worse than step 4's
    measured = scripted_tau(monkeypatch, {8: 2.9, 10: 2.0})
    s = train(tmp_path, "--optim.max_steps=10", resume=True)
    assert measured == [8, 10]  # a resumed run does not measure step 0 again
    meta = json.loads((tmp_path / "best" / "drafter.json").read_text())
    assert meta["step"] == 4 and meta["tau"] == 3.0
    after = weights(tmp_path / "best")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert s["best"]["step"] == 4


def test_best_moves_only_beyond_the_noise_and_says_why(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    """With standard errors, a higher τ must beat best/'s by more than twice the standard error of
    the difference: step 2's +0.08 is noise (margin 0.14), step 4's +0.30 is not, step 6's +0.05
    over step 4 is noise again."""
    scripted_tau(monkeypatch, {0: (1.0, 0.05), 2: (1.08, 0.05), 4: (1.3, 0.05), 6: (1.35, 0.05)})
    s = train(tmp_path, "--optim.max_steps=6")
    meta = json.loads((tmp_path / "best" / "drafter.json").read_text())
    assert meta["step"] == 4 and meta["tau"] == 1.3 and meta["tau_se"] == 0.05
    assert s["best"]["step"] == 4 and "2 standard errors" in s["best"]["why"] and "step 0" in s["best"]["why"]

    out = tmp_path / "flat"  # nothing beats step 0 beyond the noise: best/ is the untrained drafter, and says so
    scripted_tau(monkeypatch, {0: (1.0, 0.05), 2: (1.05, 0.05), 4: (1.1, 0.05)})
    s = train(out, "--optim.max_steps=4")
    assert s["best"]["step"] == 0 and s["best"]["why"] == "the first measurement"


def test_restore_best_prefers_what_best_holds_on_disk(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    """A kill after best/ was written but before the next step checkpoint: the resumed state
    records an older, lower best; best/ on disk is what a worse τ must not overwrite."""
    from draftsmith.train.trainer import checkpoint

    scripted_tau(monkeypatch, {2: 2.0, 4: 1.0})
    train(tmp_path, "--optim.max_steps=4")
    assert checkpoint.restore_best(tmp_path, {"step": 2, "tau": 2.0, "tokens": 5}) == {
        "step": 2,
        "tau": 2.0,
        "tokens": 5,
    }
    meta_path = tmp_path / "best" / "drafter.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "step": 3, "tau": 2.7}))  # as if step 3 was best and then killed
    assert checkpoint.restore_best(tmp_path, {"step": 2, "tau": 2.0, "tokens": 5})["tau"] == 2.7
    assert checkpoint.restore_best(tmp_path, {"step": 2, "tau": 2.9, "tokens": 5})["tau"] == 2.9
    shutil.rmtree(tmp_path / "best")  # gone: chosen again from the resumed step on
    assert checkpoint.restore_best(tmp_path, {"step": 2, "tau": 2.0, "tokens": 5}) is None


def test_card_says_which_checkpoint_and_its_tau(tiny_cache, tmp_path, fresh_accelerate, monkeypatch):
    from draftsmith.shipping.hub import build_card

    scripted_tau(monkeypatch, {2: 1.25, 4: 1.75, 6: 1.5})
    train(tmp_path, "--optim.max_steps=6")
    card = build_card(tmp_path / "best", [])
    line = next(x for x in card.splitlines() if x.startswith("- checkpoint:"))
    assert "`best/` (step 4)" in line and "highest τ" in line and "τ 1.75" in line and "2 held-out prompts" in line
    # a run folder stands for its best/ (the one resolver the commands share), card included
    from draftsmith.models import resolve_checkpoint

    assert resolve_checkpoint(tmp_path) == tmp_path / "best"
    assert line in build_card(tmp_path, []).splitlines()
    final = next(x for x in build_card(tmp_path / "final", []).splitlines() if x.startswith("- checkpoint:"))
    assert "`final/` (step 6)" in final and "τ 1.50" in final and "highest" not in final


def test_acceptance_prompts_keep_chat_and_code(tiny_target):
    from draftsmith.train.config import DataConfig
    from draftsmith.train.data import build_data

    data = build_data(DataConfig(path="chitchat", max_rows=60, max_length=64, eval_rows=4), tiny_target.tokenizer)
    first = [p.domain for p in data.eval_prompts[:2]]
    assert first == ["chitchat", "code"]  # held-out rows and the built-in code set, one for one
    assert {p.domain for p in data.eval_prompts} == {"chitchat", "code"}
    counts = [sum(p.domain == d for p in data.eval_prompts) for d in ("chitchat", "code")]
    assert counts[0] == counts[1] == data.stats["eval_rows"]


def test_eval_reports_taus_standard_error_over_its_prompts(tiny_target, tiny):
    """run_eval (what training measures through) gives tau's standard error with prompts as
    clusters; with one prompt it cannot be estimated and says None (never NaN in a JSON)."""
    from draftsmith.evaluation.bench import run_eval
    from draftsmith.evaluation.prompts import Prompt
    from draftsmith.infer.metrics import pooled_ratio
    from draftsmith.infer.sampling import GREEDY

    _, _, drafter = tiny("draft_lm")
    prompts = [Prompt(ids, "", "chat") for ids in ([5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12], [3, 4, 5, 6])]
    r = run_eval(tiny_target, drafter, prompts, 3, 16, GREEDY, progress=False)
    assert r["mean_acceptance_length_se"] is not None and r["mean_acceptance_length_se"] >= 0
    assert (
        run_eval(tiny_target, drafter, prompts[:1], 3, 16, GREEDY, progress=False)["mean_acceptance_length_se"] is None
    )
    rate, se = pooled_ratio([5, 10], [10, 10])
    assert rate == 0.75 and abs(se - 0.25) < 1e-12
    # bench reports the same figure beside its speedup (greedy: the same drafts as eval's)
    from draftsmith.evaluation.bench import run_bench

    b = run_bench(tiny_target, drafter, prompts, 3, 16, GREEDY, baselines=(), progress=False)
    assert b["mean_acceptance_length_se"] == pytest.approx(r["mean_acceptance_length_se"])
    assert b["mean_acceptance_length"] == pytest.approx(r["mean_acceptance_length"])


def test_the_default_acceptance_prompts_are_held_out_rows_and_built_in_prompts_one_for_one(tiny_target):
    """60 by default: 30 held-out rows and 30 built-in prompts of the other domain, so τ's standard
    error stays near 0.03 late in a CPU-scale run (32 gave 0.035-0.038 at τ ≈ 1.5)."""
    from draftsmith.train.config import DataConfig, Recipe
    from draftsmith.train.data import build_data

    n = Recipe().logging.acceptance_prompts
    assert n == 60
    data = build_data(DataConfig(path="chitchat", max_rows=800, max_length=64, eval_rows=80), tiny_target.tokenizer)
    first = data.eval_prompts[:n]
    assert len(first) == n
    assert sum(p.domain == "chitchat" for p in first) == sum(p.domain == "code" for p in first) == n // 2


def test_a_paired_tau_difference_has_the_error_its_repeats_show_and_beats_the_unpaired_one():
    """Two drafts decoding the same prompts share each prompt's difficulty: the paired standard
    error of their τ difference must match the spread of the difference over repeated experiments
    (calibrated) and be smaller than the two unpaired errors combined."""
    import math
    import random

    from draftsmith.infer.metrics import paired_ratio_difference, pooled_ratio

    rng = random.Random(0)
    diffs, ses, unpaired = [], [], []
    for _ in range(400):
        na, da, nb, db = [], [], [], []
        for _ in range(32):
            p = rng.uniform(0.1, 0.8)  # this prompt's ease, shared by both drafts
            for n, d, q in ((na, da, p), (nb, db, min(p + 0.05, 1.0))):
                k = rng.randint(10, 30)
                d.append(k)
                n.append(sum(rng.random() < q for _ in range(k)))
        diff, se = paired_ratio_difference(na, da, nb, db)
        diffs.append(diff)
        ses.append(se)
        unpaired.append(math.hypot(pooled_ratio(na, da)[1], pooled_ratio(nb, db)[1]))
    mean = sum(diffs) / len(diffs)
    spread = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1))
    assert -0.07 < mean < -0.03  # the true difference is -0.05
    assert 0.85 < (sum(ses) / len(ses)) / spread < 1.15
    assert sum(ses) < 0.6 * sum(unpaired)
    assert paired_ratio_difference([3, 4], [5, 6], [3, 4], [5, 6]) == (0.0, 0.0)
    with pytest.raises(ValueError, match="same clusters"):
        paired_ratio_difference([1, 2], [3, 4], [1], [3])


def test_run_compare_pairs_two_drafts_tau_over_the_same_prompts(tiny_target, tiny):
    """run_compare keeps each method's per-prompt acceptance; tau_difference of a method against
    itself is zero with zero error, and against another draft it equals the two τ apart."""
    from draftsmith.evaluation.bench import Method, run_compare, tau_difference
    from draftsmith.evaluation.prompts import Prompt
    from draftsmith.infer.sampling import GREEDY
    from draftsmith.models import load_drafter

    _, _, drafter = tiny("draft_lm")
    useless = load_drafter("truncated:1", tiny_target)
    prompts = [Prompt(ids, "", "chat") for ids in ([5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12], [3, 4, 5, 6])]
    methods = [Method("a", drafter, 3), Method("a again", drafter, 3), Method("useless", useless, 3)]
    r = run_compare(tiny_target, methods, prompts, 12, GREEDY, progress=False)
    assert len(r["methods"]["a"]["per_prompt_acceptance"]) == 3
    same = tau_difference(r, "a", "a again")
    assert same["difference"] == 0.0 and same["se"] == 0.0 and same["beyond_two_se"] is False
    d = tau_difference(r, "a", "useless")
    ta, tu = (r["methods"][n]["mean_acceptance_length"] for n in ("a", "useless"))
    assert d["difference"] == pytest.approx(ta - tu) and d["num_prompts"] == 3
