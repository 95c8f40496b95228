"""DFlash (models/dflash.py, train/tasks/dflash.py): the training forward equals runtime drafting, the
loss falls, checkpoints round-trip without the target, one draft forward per step, and the vLLM
export's names and keys (greedy, the sampled law, reload and the cap on K: tests/test_contract.py)."""

from __future__ import annotations

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer.engine import Engine
from draftsmith.infer.sampling import SamplingConfig
from draftsmith.infer.tree import TreeConfig
from draftsmith.models.dflash import DFlash, DFlashConfig, DFlashModel, default_target_layers, resolve_mask_token
from draftsmith.models.eagle import EagleConfig
from draftsmith.train.features import target_hidden_states
from draftsmith.train.tasks.dflash import DFlashTask, DFlashTrainConfig, sample_anchors, target_layers

BLOCK = 4  # the pending token + 3 masks: K = 3


def _model(target, seed=0, causal=False, layers=1) -> DFlashModel:
    torch.manual_seed(seed)
    cfg = DFlashConfig(
        vocab_size=target.vocab_size,
        target="tiny",
        hidden_layers=default_target_layers(8, layers),
        num_hidden_layers=layers,
        block_size=BLOCK,
        mask_token_id=0,
        causal=causal,
        **EagleConfig.layer_fields(target.config),
    )
    return DFlashModel(cfg).float()


PROMPT = [40, 41, 42, 43, 44, 45]


def _target_text(target, n_rows=16, length=40, seed=0) -> dict:
    """Rows the target wrote itself after PROMPT (sampled, top-k 3): a draft learns quickly what
    the target does there, so the sampling test below sees acceptance."""
    prompts = torch.tensor([PROMPT] * n_rows)
    torch.manual_seed(seed)
    with torch.no_grad():
        new = length - len(PROMPT)
        ids = target.model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            top_k=3,
            top_p=1.0,
            temperature=1.0,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
        )
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": torch.ones_like(ids)}


def _train(task, batch, steps, lr=1e-2):
    opt = torch.optim.AdamW(task.trainable_parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss, stats = task.loss(task.model, batch, step=step)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(stats["loss"])
    return losses


@pytest.fixture(scope="module")
def trained(tiny_target):
    """A draft trained on the target's own text for a few dozen steps (direct task, no trainer)."""
    cfg = DFlashTrainConfig(block_size=BLOCK, num_blocks=12, loss_decay=4.0)
    task = DFlashTask(cfg, tiny_target, seed=0)
    batch = _target_text(tiny_target)
    losses = _train(task, batch, 40)
    return task, batch, losses


def test_training_forward_equals_runtime_drafting(tiny_target):
    """One block of the training forward (anchor a, context < a) gives the runtime's draft law."""
    model = _model(tiny_target, seed=1)
    drafter = DFlash(model, tiny_target, "test")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, tiny_target.vocab_size, (1, 20), generator=g)
    feats = target_hidden_states(tiny_target.model, ids, torch.ones_like(ids), drafter.hidden_layers).hidden
    T = ids.shape[1]
    anchors, keep = torch.tensor([[6, 11]]), torch.ones(1, 2, dtype=torch.bool)
    from draftsmith.train.tasks.dflash import training_mask

    positions = anchors[..., None] + torch.arange(BLOCK)
    block = torch.zeros(1, 2, BLOCK, dtype=torch.long)
    block[..., 0] = ids[0, anchors[0]]
    with torch.no_grad():
        out = model(
            block.view(1, -1),
            positions.view(1, -1),
            feats,
            torch.arange(T)[None],
            attention_mask=training_mask(anchors, keep, torch.ones_like(ids), BLOCK, False),
        )
        train_probs = model.logits(out.view(1, 2, BLOCK, -1)[0, :, 1:]).softmax(-1)
    sampling = SamplingConfig(temperature=1.0)
    for i, a in enumerate(anchors[0].tolist()):
        # The engine's view at anchor a: tokens 0..a emitted, a pending; features of 0..a-1 known,
        # handed over in two pieces to exercise the cache (start, then accept).
        drafter.start(ids[:, : a - 2], 64, hidden=feats[0, : a - 2])
        drafter.propose(ids[:, : a - 1], BLOCK - 1, sampling, torch.Generator().manual_seed(0))
        drafter.accept(1, hidden=feats[0, a - 2 : a])
        proposal = drafter.propose(ids[:, : a + 1], BLOCK - 1, sampling, torch.Generator().manual_seed(0))
        assert torch.allclose(proposal.probs, train_probs[i], atol=1e-5)


def test_loss_falls_and_eval_reports_acceptance(tiny_target, trained):
    task, batch, losses = trained
    assert losses[-1] < 0.8 * losses[0]
    with torch.no_grad():
        _, stats = task.loss(task.model, batch, step=None)
    assert {"loss", "num_tokens", "step1_top1", "step3_top1", "top1_agreement", "simulated_acceptance_length"} <= set(
        stats
    )
    assert 1.0 <= stats["simulated_acceptance_length"] <= 1 + task.acceptance_k
    assert stats["top1_agreement"] > 0.1  # above chance (1/259): it has learnt something of the target


def test_checkpoint_round_trip_never_saves_the_target(tiny_target, trained, tmp_path):
    task, batch, _ = trained
    task.save(task.model, task.model.state_dict(), tmp_path, {"step": 1})
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert not any("embed" in n or "lm_head" in n for n in names)  # borrowed from the target
    assert {
        "fc.weight",
        "hidden_norm.weight",
        "norm.weight",
        "layers.0.self_attn.q_norm.weight",
        "layers.0.self_attn.k_norm.weight",
        "layers.0.mlp.gate_proj.weight",
    } <= names
    drafter = DFlash.from_pretrained(tmp_path, tiny_target)
    assert drafter.hidden_layers == target_layers(task.cfg, tiny_target.config)
    assert (
        drafter.model.config.block_size == BLOCK
        and drafter.model.config.mask_token_id == task.model.config.mask_token_id
    )
    fresh = DFlashModel(drafter.model.config).rotary
    assert torch.equal(drafter.model.rotary.inv_freq, fresh.inv_freq)  # non-persistent: recomputed
    for name, p in task.model.state_dict().items():
        assert torch.equal(p, drafter.model.state_dict()[name]), name


@pytest.mark.parametrize("causal", [False, True])
def test_greedy_equals_plain_decoding_with_one_draft_forward_per_step(tiny_target, trained, causal):
    task, _, _ = trained
    model = task.model if not causal else _model(tiny_target, causal=True)
    drafter = DFlash(model, tiny_target, "test")
    calls = []
    forward = model.forward
    model.forward = lambda *a, **kw: calls.append(1) or forward(*a, **kw)
    try:
        engine = Engine(tiny_target, drafter, 3)  # the whole block: pending token + 3 masks
        prompt = PROMPT
        new = 24 if causal else 40  # the untrained causal draft accepts little: each token costs a step
        plain = engine.generate(prompt, new, speculative=False, eos_token_ids=())
        calls.clear()
        spec = engine.generate(prompt, new, eos_token_ids=())
    finally:
        model.forward = forward
    assert spec.tokens == plain.tokens
    assert len(calls) == spec.metrics.drafts == spec.target_forwards  # ONE draft forward per step
    assert spec.metrics.drafted_tokens <= 3 * spec.metrics.drafts
    if not causal:
        assert spec.metrics.accepted_tokens > 0  # the trained draft is right some of the time


def test_drafting_under_bf16_autocast_as_training_measures_acceptance(tiny_target, trained):
    """Training with mixed_precision bf16 measures acceptance inside autocast: the projections come
    out in bf16 while the draft's context cache is fp32, and must be stored, not refused."""
    task, _, _ = trained
    engine = Engine(tiny_target, DFlash(task.model, tiny_target, "test"), 3)
    plain = engine.generate(PROMPT, 12, speculative=False, eos_token_ids=())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        spec = engine.generate(PROMPT, 12, eos_token_ids=())
    assert spec.metrics.drafts > 0 and len(spec.tokens) == len(plain.tokens)


def test_bad_inputs_are_clear(tiny_target):
    drafter = DFlash(_model(tiny_target), tiny_target, "test")
    with pytest.raises(DraftsmithError, match="chain"):
        Engine(tiny_target, drafter, 3, tree=TreeConfig(topk=2, depth=2))
    with pytest.raises(DraftsmithError, match="hidden states"):
        drafter.start(torch.tensor([[1, 2]]), 16)
    bad = _model(tiny_target)
    bad.config.hidden_layers = [8]  # after the final norm: no engine hands a drafter that
    with pytest.raises(DraftsmithError, match="hidden states 1..7"):
        DFlash(bad, tiny_target, "bad")
    with pytest.raises(DraftsmithError, match="aux_layers"):
        DFlashTask(DFlashTrainConfig(aux_layers=[0, 4]), tiny_target)
    with pytest.raises(DraftsmithError, match="outside"):
        resolve_mask_token(tiny_target.tokenizer, tiny_target.vocab_size, 10_000)
    assert resolve_mask_token(tiny_target.tokenizer, tiny_target.vocab_size) == tiny_target.tokenizer.pad_token_id


def test_anchors_are_distinct_trained_positions():
    loss_mask = torch.zeros(2, 12, dtype=torch.long)
    loss_mask[0, 5:] = 1
    loss_mask[1, 11:] = 1  # one valid anchor only: a = 10 (token 11 trained; a = 11 has no next token)
    anchors, keep = sample_anchors(loss_mask, torch.ones(2, 12), 4, torch.Generator().manual_seed(0))
    assert anchors.shape == (2, 4) and keep[0].all() and keep[1].tolist() == [True, False, False, False]
    assert len(set(anchors[0].tolist())) == 4 and all(4 <= a <= 10 for a in anchors[0].tolist())
    assert anchors[1, 0] == 10


# --- export: the layouts vLLM and SGLang load ------------------------------------------------------


# vLLM's DFlashQwen3ForCausalLM.load_weights (model_executor/models/qwen3_dflash.py), restated:
# t2d dropped, d2t -> draft_id_to_target_id, every other name but lm_head gets "model."; then
# DFlashQwen3Model's mapper stacks q/k/v into qkv_proj and gate/up into gate_up_proj.
def _vllm_param_names(names, num_layers: int) -> set[str]:
    stacked = {
        ".q_proj": ".qkv_proj",
        ".k_proj": ".qkv_proj",
        ".v_proj": ".qkv_proj",
        ".gate_proj": ".gate_up_proj",
        ".up_proj": ".gate_up_proj",
    }
    out = set()
    for name in names:
        assert "mask_hidden" not in name and "embed_tokens" not in name and "lm_head" not in name
        name = "model." + name
        for a, b in stacked.items():
            name = name.replace(a, b)
        out.add(name)
    return out


def _vllm_params(num_layers: int) -> set[str]:
    """The parameters of vLLM's DFlashQwen3Model that a checkpoint must fill (embed_tokens,
    lm_head: shared from the target; mask_embedding: only with mask_embedding.pt)."""
    layer = [
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
        "self_attn.qkv_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_up_proj.weight",
        "mlp.down_proj.weight",
    ]
    return {
        "model.fc.weight",
        "model.hidden_norm.weight",
        "model.norm.weight",
        *(f"model.layers.{i}.{n}" for i in range(num_layers) for n in layer),
    }


def test_vllm_and_sglang_exports_load_by_name(tiny_target, trained, tmp_path):
    import json

    from draftsmith.shipping.export import EXPORT_META, check, export
    from draftsmith.shipping.export.common import weight_shapes

    task, _, _ = trained
    ckpt = tmp_path / "ckpt"
    task.save(task.model, task.model.state_dict(), ckpt, {"step": 1})
    for fmt in ("vllm", "sglang", "hf"):
        out = export(ckpt, fmt, tmp_path / fmt)
        assert check(out, fmt, "dflash") == [], fmt
    cfg = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["block_size"] == BLOCK and cfg["num_hidden_layers"] == 1 and cfg["num_target_layers"] == 8
    assert cfg["dflash_config"] == {"target_layer_ids": [1, 3, 5], "mask_token_id": 0, "causal": False}
    # vLLM's aux ids (dflash ids + 1) are our hidden_states indices: the layers the draft was trained on
    assert [i + 1 for i in cfg["dflash_config"]["target_layer_ids"]] == list(task.model.config.hidden_layers)
    shapes = weight_shapes(tmp_path / "vllm")
    assert _vllm_param_names(shapes, 1) == _vllm_params(1)
    assert shapes["fc.weight"] == (64, 3 * 64)
    notes = json.loads((tmp_path / "vllm" / EXPORT_META).read_text())
    assert '"method": "dflash"' in json.dumps(notes) and '"num_speculative_tokens": 3' in json.dumps(
        notes
    )  # the whole block
    assert json.loads((tmp_path / "sglang" / "config.json").read_text()) == cfg  # one layout for both engines


def test_loss_norm_tokens_divides_by_the_scored_positions(tiny_target):
    """loss_norm weights: Σ w·L / Σ w; tokens (speculators'): Σ w·L / N, N the scored block
    positions. Same draft, same anchors: the two losses differ by exactly Σ w / N."""
    T, Bs = 24, 4
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, tiny_target.vocab_size, (1, T), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    batch = {"input_ids": ids, "loss_mask": mask, "attention_mask": torch.ones_like(ids)}
    losses = {}
    for norm in ("weights", "tokens"):
        torch.manual_seed(0)
        task = DFlashTask(DFlashTrainConfig(block_size=Bs, num_blocks=3, loss_norm=norm), tiny_target, seed=0)
        losses[norm] = float(task.loss(task.model, batch, step=0)[0].detach())
    anchors, keep = sample_anchors(mask, batch["attention_mask"], 3, torch.Generator().manual_seed(1))
    labels = anchors[..., None] + torch.arange(1, Bs)  # block position k predicts token anchor+k
    scored = keep[..., None] & (labels < T) & mask[0, labels.clamp(max=T - 1)].bool()
    w = torch.exp(-torch.arange(Bs - 1).float() / 4.0).expand_as(scored)[scored]
    assert losses["tokens"] == pytest.approx(losses["weights"] * float(w.sum()) / w.numel(), rel=1e-5)
    assert losses["tokens"] < losses["weights"]
