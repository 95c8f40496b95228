"""The `references` tier: each kind's training step equals its reference trainer's.

For the same initial weights, the same batch and the same target features, draftsmith's loss and
gradients (its task, train/tasks/<kind>.py) are compared with those the reference implementation
computes in its own venv (bash scripts/install_references.sh; tests/references/<driver>.py runs
there in a subprocess and writes them back). fp32 on the CPU, within ATOL / RTOL below. Where
draftsmith differs by design, the recipe switch that reproduces the reference's choice is set
(docs/methods.md, "Differences from the reference trainers", lists them).

    bash scripts/install_references.sh && python -m pytest -m references tests/test_references.py

A reference whose venv is absent is skipped, saying which install command brings it.
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import torch

pytestmark = pytest.mark.references

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCES = ROOT / ".references"
DRIVERS = pathlib.Path(__file__).parent / "references"

# fp32 throughout; the two sides sum the same terms in different orders (their attention kernels,
# reductions, RoPE tables), so equality is up to a few float32 ulps of accumulated rounding, and
# speculators divides each step's sum by (loss-mask count + 1e-5): a relative 1e-6 on ~10 tokens.
LOSS_ATOL, LOSS_RTOL = 1e-6, 1e-5
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4


def run_reference(name: str, driver: str, case: dict, tmp_path: pathlib.Path) -> dict:
    """Save `case`, run tests/references/`driver` in .references/`name`'s venv, load its result."""
    python = REFERENCES / name / "bin" / "python"
    if not (REFERENCES / name / "INSTALLED").is_file():
        pytest.skip(f"reference {name} not installed: bash scripts/install_references.sh {name}")
    case_path, out_path = tmp_path / "case.pt", tmp_path / "result.pt"
    torch.save(case, case_path)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [str(python), str(DRIVERS / driver), str(case_path), str(out_path)], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, f"{driver} failed in {name}'s venv:\n{run.stderr[-3000:]}"
    return torch.load(out_path)


def compare(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], names: dict[str, str]) -> float:
    """Every reference gradient has its draftsmith twin (`names`: reference -> ours) and matches
    it; returns the largest absolute difference."""
    assert set(theirs) == set(names), f"trainable parameters differ: {sorted(set(theirs) ^ set(names))}"
    assert set(ours) == set(names.values()), f"trainable parameters differ: {sorted(set(ours) ^ set(names.values()))}"
    worst = 0.0
    for ref_name, name in names.items():
        a, b = ours[name], theirs[ref_name]
        assert a.shape == b.shape, f"{name}: {tuple(a.shape)} vs {ref_name}: {tuple(b.shape)}"
        assert float(a.abs().max()) > 0, f"{name}: no gradient reaches it"
        torch.testing.assert_close(a, b, atol=GRAD_ATOL, rtol=GRAD_RTOL, msg=lambda m, n=name: f"{n}: {m}")
        worst = max(worst, float((a - b).abs().max()))
    return worst


def close_loss(ours: float, theirs: float) -> float:
    diff = abs(ours - theirs)
    assert diff <= LOSS_ATOL + LOSS_RTOL * abs(theirs), f"loss {ours} vs the reference's {theirs}"
    return diff


def report(kind: str, reference: str, loss_diff: float, grad_diff: float) -> None:
    print(f"\n{kind} vs {reference}: max |loss diff| {loss_diff:.2e}, max |grad diff| {grad_diff:.2e}")


def perturb(model: torch.nn.Module, seed: int) -> None:
    """Move every weight off its initial value (norm weights off 1) so that a swapped or skipped
    norm or projection shows in the gradients."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.1 if p.dim() == 1 else 0.02))


def turns(T: int) -> torch.Tensor:
    """A loss mask with two replies, so that turn edges fall inside the sequence."""
    mask = torch.zeros(T, dtype=torch.long)
    mask[5 : T // 2] = 1
    mask[T // 2 + 4 : T - 2] = 1
    return mask


# --- EAGLE-3 ------------------------------------------------------------------------------------


def eagle3_step(target, cfg, T: int = 24, seed: int = 0):
    """draftsmith's EAGLE-3 step on one sequence: (task, model, batch, loss, grads by name)."""
    from draftsmith.models.eagle3 import frequent_tokens
    from draftsmith.train.tasks.eagle3 import Eagle3Task

    torch.manual_seed(seed)
    task = Eagle3Task(cfg, target, seed=seed)
    model = task.model
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, target.vocab_size, (1, T), generator=g)
    mask = turns(T)[None]
    draft_ids = frequent_tokens(ids, torch.ones_like(ids), target.vocab_size, model.config.draft_vocab_size)
    model.set_vocab(draft_ids, target.model.get_output_embeddings())
    perturb(model, seed)
    batch = {"input_ids": ids, "loss_mask": mask, "attention_mask": torch.ones_like(ids)}
    loss, _ = task.loss(model, batch, step=0)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return task, model, batch, float(loss.detach()), grads


def eagle3_case(task, model, batch, target) -> dict:
    """The reference's inputs: weights under speculators' names, the target's features."""
    captured = {}
    hook = target.model.model.norm.register_forward_pre_hook(lambda m, a: captured.setdefault("last", a[0].detach()))
    try:
        feats = task.features(batch)
    finally:
        hook.remove()
    weights = {n.replace("midlayer.", "layers.0."): t.detach().clone() for n, t in model.state_dict().items()}
    head = target.model.get_output_embeddings().weight.detach()
    weights["embed_tokens.weight"] = target.model.get_input_embeddings().weight.detach().clone()
    weights["verifier_lm_head.weight"] = head[model.draft_to_target].clone()
    weights["verifier_norm.weight"] = target.model.model.norm.weight.detach().clone()
    c = model.config
    config = {k: getattr(c, k) for k in ("hidden_size", "intermediate_size", "num_attention_heads", "rms_norm_eps")}
    config.update(
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        hidden_act=c.hidden_act,
        max_position_embeddings=c.max_position_embeddings,
        vocab_size=c.vocab_size,
        rope_parameters=dict(c.rope_parameters),
    )
    return {
        "config": config,
        "draft_vocab_size": c.draft_vocab_size,
        "aux_layers": list(c.hidden_layers),
        "norm_before_residual": False,  # draftsmith's (and EAGLE-3's): the residual is the raw hidden state
        "ttt_steps": task.cfg.ttt_steps,
        "ttt_decay": task.cfg.ttt_decay,
        "weights": weights,
        "batch": {
            "input_ids": batch["input_ids"][0],
            "hidden_states": task._draft_features(feats.hidden)[0].float(),
            "verifier_last_hidden_states": captured["last"][0].float(),
            "loss_mask": batch["loss_mask"][0],
        },
    }


def speculators_recipe(**kw):
    """The EAGLE-3 recipe switches set to speculators' choices (docs/methods.md)."""
    from draftsmith.train.tasks.eagle3 import Eagle3TrainConfig

    return Eagle3TrainConfig(
        **{"ttt_steps": 3, "ttt_decay": 0.8, "draft_vocab_size": 128, "train_lm_head": False, "loss_mask_at": "input"}
        | kw
    )


def test_eagle3_step_equals_speculators(tiny_target, tmp_path):
    task, model, batch, loss, grads = eagle3_step(tiny_target, speculators_recipe())
    ref = run_reference("speculators", "speculators_eagle3.py", eagle3_case(task, model, batch, tiny_target), tmp_path)
    # draftsmith's fkl is the cross-entropy KL(p || q) + H(p); speculators' is KL(p || q)
    theirs = float(ref["loss"]) + float(ref["entropy"])
    loss_diff = close_loss(loss, theirs)
    names = {n.replace("midlayer.", "layers.0."): n for n in grads}
    report("eagle3", "speculators 0.9.0", loss_diff, compare(grads, ref["grads"], names))
    # The switch is what makes them equal: draftsmith's own alignment scores other positions.
    own = eagle3_step(tiny_target, speculators_recipe(loss_mask_at="label"))[3]
    assert abs(own - theirs) > 1e-3, "the loss-mask alignment made no difference: the test cannot see it"


# --- Medusa-1 -----------------------------------------------------------------------------------


def test_medusa1_step_equals_medusa_llm(tiny_target, tmp_path):
    """medusa-llm 0.1 sums the heads' cross-entropies unweighted (decay 1) and stacks one
    ResBlock per head (with more, it repeats one shared block: docs/methods.md)."""
    from draftsmith.train.tasks.medusa import MedusaTask, MedusaTrainConfig

    T, K = 24, 3
    torch.manual_seed(0)
    task = MedusaTask(MedusaTrainConfig(num_heads=K, num_layers=1, decay=1.0), tiny_target, seed=0)
    model = task.model
    perturb(model, 0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, tiny_target.vocab_size, (1, T), generator=g)
    mask = turns(T)[None]
    batch = {"input_ids": ids, "loss_mask": mask, "attention_mask": torch.ones_like(ids)}
    loss, _ = task.loss(model, batch, step=0)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        hidden = tiny_target.model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
    names = {}
    for (
        n
    ) in grads:  # blocks.{k}.0.linear.* -> medusa_head.{k}.0.linear.*, lm_heads.{k}.weight -> medusa_head.{k}.1.weight
        part = n.split(".")
        names[f"medusa_head.{part[1]}.{'.'.join(part[2:]) if part[0] == 'blocks' else '1.weight'}"] = n
    weights = {ref[len("medusa_head.") :]: model.state_dict()[n].clone() for ref, n in names.items()}
    case = {
        "num_heads": K,
        "num_layers": 1,
        "weights": weights,
        "lm_head": tiny_target.model.get_output_embeddings().weight.detach().clone(),
        "hidden": hidden.float(),
        "batch": {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.masked_fill(mask == 0, -100)},
    }
    ref = run_reference("medusa", "medusa_medusa1.py", case, tmp_path)
    loss_diff = close_loss(float(loss.detach()), float(ref["loss"]))
    report("medusa (Medusa-1)", "medusa-llm 0.1", loss_diff, compare(grads, ref["grads"], names))


# --- EAGLE-1 ------------------------------------------------------------------------------------


def test_eagle1_step_equals_eagle_llm(tiny_target, tmp_path):
    """eagle-llm 1.2.1 counts row t where the token at its feature's position is a reply token
    (drafter.loss_mask_at: feature); noise off on both sides (their scales differ: docs/methods.md)."""
    from draftsmith.train.tasks.eagle import EagleTask, EagleTrainConfig

    T = 24

    def step(loss_mask_at):
        torch.manual_seed(0)
        task = EagleTask(EagleTrainConfig(noise=0.0, loss_mask_at=loss_mask_at), tiny_target, seed=0)
        model = task.model
        perturb(model, 0)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, tiny_target.vocab_size, (1, T), generator=g)
        batch = {"input_ids": ids, "loss_mask": turns(T)[None], "attention_mask": torch.ones_like(ids)}
        loss, _ = task.loss(model, batch, step=0)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        return task, model, batch, float(loss.detach()), grads

    task, model, batch, loss, grads = step("feature")
    c = model.config
    weights = {n: t.detach().clone() for n, t in model.state_dict().items()}
    weights["embed_tokens.weight"] = tiny_target.model.get_input_embeddings().weight.detach().clone()
    case = {
        "config": {
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "hidden_act": c.hidden_act,
            "max_position_embeddings": c.max_position_embeddings,
            "rms_norm_eps": c.rms_norm_eps,
        },
        "weights": weights,
        "lm_head": tiny_target.model.get_output_embeddings().weight.detach().clone(),
        "hidden_state": task.features(batch).hidden[0].float(),
        "input_ids": batch["input_ids"][0],
        "loss_mask": batch["loss_mask"][0],
        "v_w": task.cfg.feature_loss_weight,
        "p_w": task.cfg.cls_loss_weight,
    }
    # eagle-llm's RoPE base is 10000 whatever the target: the comparison holds for targets with that theta
    assert float(c.rope_parameters.get("rope_theta", 10000.0)) == 10000.0
    ref = run_reference("eagle", "eagle_eagle1.py", case, tmp_path)
    loss_diff = close_loss(loss, float(ref["loss"]))
    report("eagle (EAGLE-1)", "eagle-llm 1.2.1", loss_diff, compare(grads, ref["grads"], {n: n for n in grads}))
    own = step("label")[3]
    assert abs(own - float(ref["loss"])) > 1e-3, "the loss-mask alignment made no difference: the test cannot see it"


# --- DFlash -------------------------------------------------------------------------------------


def test_dflash_step_equals_speculators(tiny_target, tmp_path):
    """speculators divides the weighted sum by the number of scored positions (drafter.loss_norm:
    tokens); both score the anchors draftsmith drew (the driver says how)."""
    from draftsmith.train.tasks.dflash import DFlashTask, DFlashTrainConfig, sample_anchors

    T, seed = 32, 0
    cfg = DFlashTrainConfig(num_layers=2, block_size=4, num_blocks=4, loss_norm="tokens")
    torch.manual_seed(seed)
    task = DFlashTask(cfg, tiny_target, seed=seed)
    model = task.model
    perturb(model, seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, tiny_target.vocab_size, (1, T), generator=g)
    batch = {"input_ids": ids, "loss_mask": turns(T)[None], "attention_mask": torch.ones_like(ids)}
    loss, _ = task.loss(model, batch, step=0)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    # the anchors the step drew: the same generator (DFlashTask.loss seeds it from seed and step)
    anchors, keep = sample_anchors(
        batch["loss_mask"], batch["attention_mask"], cfg.num_blocks, torch.Generator().manual_seed(seed * 1_000_003 + 1)
    )
    assert bool(keep.all()) and int(anchors.max()) + cfg.block_size <= T

    captured = {}
    hook = tiny_target.model.model.norm.register_forward_pre_hook(lambda m, a: captured.setdefault("last", a[0]))
    try:
        feats = task.features(batch)
    finally:
        hook.remove()
    c = model.config
    weights = {n: t.detach().clone() for n, t in model.state_dict().items()}
    weights["embed_tokens.weight"] = tiny_target.model.get_input_embeddings().weight.detach().clone()
    weights["lm_head.weight"] = tiny_target.model.get_output_embeddings().weight.detach().clone()
    weights["verifier_lm_head.weight"] = weights["lm_head.weight"].clone()
    weights["verifier_norm.weight"] = tiny_target.model.model.norm.weight.detach().clone()
    case = {
        "config": {
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": c.head_dim,
            "rms_norm_eps": c.rms_norm_eps,
            "hidden_act": c.hidden_act,
            "max_position_embeddings": c.max_position_embeddings,
            "rope_parameters": dict(c.rope_parameters),
            "attention_bias": False,
        },
        "aux_layers": [i - 1 for i in c.hidden_layers],  # speculators counts decoder-layer outputs from 0
        "block_size": c.block_size,
        "mask_token_id": c.mask_token_id,
        "gamma": cfg.loss_decay,
        "anchors": anchors[0],
        "weights": weights,
        "batch": {
            "input_ids": ids[0],
            "hidden_states": feats.hidden[0, :, : len(c.hidden_layers) * c.hidden_size].float(),
            "verifier_last_hidden_states": captured["last"][0].float(),
            "loss_mask": batch["loss_mask"][0],
        },
    }
    ref = run_reference("speculators", "speculators_dflash.py", case, tmp_path)
    theirs = float(ref["loss"]) + float(ref["entropy"])  # speculators' KL + H(p): draftsmith's soft CE
    loss_diff = close_loss(float(loss.detach()), theirs)
    report("dflash", "speculators 0.9.0", loss_diff, compare(grads, ref["grads"], {n: n for n in grads}))


def test_eagle3_step_equals_specforge(tiny_target, tmp_path):
    """SpecForge reads the loss mask at the feature's token, divides each step by all B*T
    positions, skips rows whose target top-1 is outside the draft vocabulary, and trains the LM
    head: drafter.loss_mask_at feature, loss_norm positions, score_out_of_vocab false."""
    cfg = speculators_recipe(
        train_lm_head=True, loss_mask_at="feature", loss_norm="positions", score_out_of_vocab=False
    )
    task, model, batch, loss, grads = eagle3_step(tiny_target, cfg)
    feats = task.features(batch, want_logits=True)
    t2d = model.t2d.clone()
    assert not bool(t2d[feats.logits[0].argmax(-1)].all()), "every target top-1 is in the draft vocabulary"
    weights = {n: t.detach().clone() for n, t in model.state_dict().items()}
    weights["embed_tokens.weight"] = tiny_target.model.get_input_embeddings().weight.detach().clone()
    case = eagle3_case(task, model, batch, tiny_target)
    case["config"]["draft_vocab_size"] = model.config.draft_vocab_size
    case["weights"] = weights
    case["batch"]["logits"] = feats.logits[0].float()
    ref = run_reference("specforge", "specforge_eagle3.py", case, tmp_path)
    loss_diff = close_loss(loss, float(ref["loss"]))
    report("eagle3", "SpecForge 0.2.0", loss_diff, compare(grads, ref["grads"], {n: n for n in grads}))
