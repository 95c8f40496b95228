"""The trainer's precision: `optim.mixed_precision: auto` follows the machine (infer/hardware.py's
probe, mocked both ways here), every kind's LM heads multiply in bf16 under bf16 autocast, and
DFlash reads the target's logits only at the positions its loss scores, with an unchanged loss."""

from __future__ import annotations

import pathlib

import pytest
import torch

from draftsmith.infer import hardware
from draftsmith.train import distributed
from draftsmith.train.config import load_recipe
from draftsmith.train.features import OnlineFeatures
from draftsmith.train.features.online import Features
from draftsmith.train.tasks.dflash import DFlashTask, DFlashTrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICK = [
    "--data.max_rows=24",
    "--data.max_length=48",
    "--data.eval_rows=4",
    "--optim.batch_size=2",
    "--logging.progress=false",
    "--logging.acceptance_prompts=0",
]


@pytest.fixture
def cpu_probe(monkeypatch, tmp_path):
    """resolve_mixed_precision on a CPU whose flags and bf16/fp32 matmul times are given."""
    monkeypatch.delenv("DRAFTSMITH_DTYPE_AUTO", raising=False)
    monkeypatch.setenv("DRAFTSMITH_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def setup(flags: dict, bf16_s: float):
        info = {"model": "Test CPU", "flags": flags, "cores": 2, "affinity_cores": 2, "threads": 2}
        monkeypatch.setattr(hardware, "cpu_info", lambda: info)
        monkeypatch.setattr(hardware, "_probe", lambda dtype, repeats=30: bf16_s if dtype == torch.bfloat16 else 1.0)

    return setup


def test_auto_is_bf16_on_a_cpu_with_fast_bf16(cpu_probe):
    cpu_probe({"avx512_bf16": True, "amx_bf16": False}, bf16_s=0.3)
    mixed, why = distributed.resolve_mixed_precision("auto")
    assert mixed == "bf16" and "avx512_bf16" in why and "0.30x" in why


@pytest.mark.parametrize(
    "flags, bf16_s, reason",
    [
        ({"avx2": True, "avx512_bf16": False, "amx_bf16": False}, 0.3, "without AMX or AVX512-BF16"),
        ({"amx_bf16": True, "avx512_bf16": True}, 0.95, "0.95x"),  # the flags, but not faster
    ],
)
def test_auto_is_fp32_on_a_cpu_without_fast_bf16(cpu_probe, flags, bf16_s, reason):
    cpu_probe(flags, bf16_s)
    mixed, why = distributed.resolve_mixed_precision("auto")
    assert mixed == "no" and reason in why


def test_auto_follows_the_runtime_override_and_explicit_values_stay(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "float32")  # the tests' setting: exactness in fp32
    assert distributed.resolve_mixed_precision("auto") == ("no", "auto: set by DRAFTSMITH_DTYPE_AUTO")
    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "bfloat16")
    assert distributed.resolve_mixed_precision("auto")[0] == "bf16"
    assert distributed.resolve_mixed_precision("no") == ("no", "asked for")


def _head_dtypes(trainer, kind: str) -> dict:
    """One training loss of `trainer` -> {LM head width: dtypes its products came out in}, for
    every linear map onto the target's or the draft's vocabulary (draft and target alike)."""
    from torch.overrides import TorchFunctionMode

    model = trainer.task.model
    vocabs = {trainer.target.vocab_size, getattr(getattr(model, "config", None), "draft_vocab_size", None)} - {None}
    seen: dict[int, set] = {}

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.nn.functional.linear and out.shape[-1] in vocabs:
                seen.setdefault(out.shape[-1], set()).add(out.dtype)
            return out

    batch = next(iter(trainer.loader))
    with Record():
        loss, _ = trainer.loss(batch, 0)
    assert torch.isfinite(loss) and loss.dtype == torch.float32, kind  # the loss itself stays fp32
    return seen


@pytest.mark.parametrize("kind", ["draft_lm", "eagle", "eagle3", "dflash", "medusa", "pard"])
def test_every_heads_lm_head_runs_in_bf16_under_auto(kind, tiny_cache, tmp_path, monkeypatch, fresh_accelerate):
    from draftsmith.train.trainer.loop import Trainer

    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "bfloat16")  # a machine with fast bf16
    recipe = load_recipe(
        ROOT / "configs" / "tiny" / f"{kind}.yaml",
        [*QUICK, "--optim.mixed_precision=auto", f"--checkpoint.output_dir={tmp_path}"],
    )
    trainer = Trainer(recipe)
    try:
        assert trainer.acc.mixed_precision == "bf16" and "DRAFTSMITH_DTYPE_AUTO" in trainer.acc.mixed_precision_reason
        assert trainer.target.dtype == torch.bfloat16  # model.target_dtype auto follows it
        seen = _head_dtypes(trainer, kind)
    finally:
        trainer.close()
    assert seen and all(dtypes == {torch.bfloat16} for dtypes in seen.values()), (kind, seen)


def test_fp32_when_auto_finds_no_fast_bf16(tiny_cache, tmp_path, fresh_accelerate):
    """The same measurement under the tests' DRAFTSMITH_DTYPE_AUTO=float32: every product in fp32."""
    from draftsmith.train.trainer.loop import Trainer

    recipe = load_recipe(
        ROOT / "configs" / "tiny" / "eagle3.yaml",
        [*QUICK, "--optim.mixed_precision=auto", f"--checkpoint.output_dir={tmp_path}"],
    )
    trainer = Trainer(recipe)
    try:
        assert trainer.acc.mixed_precision == "no" and trainer.target.dtype == torch.float32
        seen = _head_dtypes(trainer, "eagle3")
    finally:
        trainer.close()
    assert seen and all(dtypes == {torch.float32} for dtypes in seen.values()), seen


def test_run_summary_records_the_resolved_precision(tiny_cache, tmp_path, monkeypatch, fresh_accelerate):
    from draftsmith.train.trainer.loop import train

    monkeypatch.setenv("DRAFTSMITH_DTYPE_AUTO", "bfloat16")
    recipe = load_recipe(
        ROOT / "configs" / "tiny" / "eagle3.yaml",
        [
            *QUICK,
            "--optim.mixed_precision=auto",
            "--optim.max_steps=2",
            "--logging.eval_batches=1",
            f"--checkpoint.output_dir={tmp_path}",
        ],
    )
    s = train(recipe)
    assert s["mixed_precision"] == "bf16" and s["target_dtype"] == "bfloat16"
    assert "DRAFTSMITH_DTYPE_AUTO" in s["mixed_precision_reason"]
    assert all(torch.isfinite(torch.tensor(h["train/loss"])) for h in s["history"] if "train/loss" in h)


class AllRows:
    """The target's features with its LM head over every position (as DFlash once read them),
    indexed so that any (b, t) finds its own row: the reference the selected rows must match.
    Records the rows the task asked for."""

    def __init__(self, online):
        self.online, self.asked = online, []

    def __call__(self, batch, want_logits=False, logit_rows=None):
        self.asked.append(logit_rows)
        full = self.online(batch, want_logits=want_logits)
        B, T, V = full.logits.shape
        return Features(full.hidden, full.logits.reshape(B * T, V), torch.arange(B * T).view(B, T))


def test_dflash_reads_target_logits_only_where_its_loss_does_and_the_loss_is_unchanged(tiny_target):
    torch.manual_seed(0)
    ids = torch.randint(3, tiny_target.vocab_size, (3, 40))
    loss_mask = torch.ones_like(ids)
    loss_mask[:, :12] = 0  # a prompt: never scored
    attn = torch.ones_like(ids)
    attn[2, 30:] = 0  # padding
    batch = {"input_ids": ids, "attention_mask": attn, "loss_mask": loss_mask}
    for labels in ("distill", "tokens"):
        task = DFlashTask(DFlashTrainConfig(num_blocks=4, block_size=4, labels=labels), tiny_target)
        head_rows = []
        hook = tiny_target.model.get_output_embeddings().register_forward_hook(
            lambda module, args, out: head_rows.append(args[0].shape[:-1].numel())
        )
        try:
            loss, stats = task.loss(task.model, batch, step=5)
        finally:
            hook.remove()
        reference = AllRows(OnlineFeatures(tiny_target, task.layers))
        task.features = reference
        ref_loss, ref_stats = task.loss(task.model, batch, step=5)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
        assert loss.dtype == torch.float32 and stats["step1_top1"] == ref_stats["step1_top1"]
        rows = reference.asked[0]
        # At most num_blocks * (block_size - 1) scored tokens per row, their predecessors only,
        # never a prompt or padding position; and the target's head ran on those rows alone.
        assert 0 < int(rows.sum()) <= 3 * 4 * 3 and not rows[:, :11].any() and not rows[2, 29:].any()
        assert head_rows == [int(rows.sum())] and head_rows[0] < ids.numel()


def test_one_process_trains_a_bf16_recipe_then_an_fp32_one(tiny_cache, tmp_path, fresh_accelerate):
    """accelerate keeps one state per process and refuses a second Accelerator with another mixed
    precision: a notebook training bf16 then fp32 stopped inside accelerate. The trainer resets a
    finished single-process state."""
    from draftsmith.train.trainer.loop import train

    summaries = []
    for precision in ("bf16", "no"):
        recipe = load_recipe(
            ROOT / "configs" / "tiny" / "eagle3.yaml",
            [
                *QUICK,
                f"--optim.mixed_precision={precision}",
                "--optim.max_steps=1",
                "--logging.eval_batches=1",
                f"--checkpoint.output_dir={tmp_path / precision}",
            ],
        )
        summaries.append(train(recipe))
    assert [s["mixed_precision"] for s in summaries] == ["bf16", "no"]
