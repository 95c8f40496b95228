"""Medusa heads (Cai et al. 2024): the module, the loss indexing, Medusa-1/2 training through the
real trainer on tiny-random, checkpoints, proposals (chain and tree) and clear errors."""

import json
import pathlib

import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine
from draftsmith.infer.sampling import GREEDY, SamplingConfig
from draftsmith.infer.tree import TreeConfig
from draftsmith.models.medusa import Medusa, MedusaConfig, MedusaHeads
from draftsmith.train.config import load_recipe

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY1 = ROOT / "configs" / "tiny" / "medusa.yaml"
TINY2 = ROOT / "configs" / "tiny" / "medusa2.yaml"
QUICK = [
    "--data.max_rows=120",
    "--data.max_length=64",
    "--optim.batch_size=4",
    "--logging.progress=false",
    "--logging.eval_every=1000",
    "--logging.eval_batches=1",
    "--logging.acceptance_prompts=1",
    "--logging.acceptance_max_new_tokens=8",
]


def train_recipe(recipe, out, *overrides):
    from draftsmith.train.trainer.loop import train

    return train(load_recipe(recipe, QUICK + [f"--checkpoint.output_dir={out}"] + list(overrides)))


def fingerprint(module, skip=()):
    from draftsmith.train.distributed import fingerprint as fp

    class Only(torch.nn.Module):  # the named parameters of `module` minus those whose name contains `skip`
        def named_parameters(self, *a, **k):
            return [(n, p) for n, p in module.named_parameters() if not any(s in n for s in skip)]

    return fp(Only())


@pytest.fixture
def heads(tiny_target):
    torch.manual_seed(0)
    h = MedusaHeads.from_target(tiny_target.model, num_heads=4, num_layers=1, target_name="tiny-random")
    for block in h.blocks:  # trained-looking heads: distinct per head
        torch.nn.init.normal_(block[0].linear.weight, std=0.3)
    return h


def hidden_of(target, ids):
    out = target.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    return out.hidden_states[-1][0]


# --- the module --------------------------------------------------------------------------------


def test_untrained_heads_equal_the_lm_head_and_save_no_target_weights(tiny_target, tmp_path):
    h = MedusaHeads.from_target(tiny_target.model, num_heads=3, num_layers=2)
    x = torch.randn(5, 64)
    ref = tiny_target.model.get_output_embeddings()(x)
    logits = h(x)
    assert logits.shape == (3, 5, tiny_target.vocab_size)
    assert torch.equal(logits, ref.expand_as(logits))
    keys = set(h.state_dict())
    target_keys = set(tiny_target.model.state_dict())
    assert not keys & target_keys and not any(k.startswith(("model.", "lm_head.")) for k in keys)
    h.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    assert set(load_file(tmp_path / "model.safetensors")) == keys
    back = MedusaHeads.from_pretrained(tmp_path)
    assert torch.equal(back(x), logits)


def test_shared_lm_head_is_never_saved_and_reattaches(tiny_target, tmp_path):
    h = MedusaHeads.from_target(tiny_target.model, num_heads=2, share_lm_head=True)
    assert not any("lm_head" in k for k in h.state_dict())
    assert all(p is not tiny_target.model.lm_head.weight for p in h.parameters())
    x = torch.randn(4, 64)
    assert torch.equal(h(x)[1], tiny_target.model.lm_head(x))
    h.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    assert all(k.startswith("blocks.") for k in load_file(tmp_path / "model.safetensors"))
    (tmp_path / "drafter.json").write_text(json.dumps({"kind": "medusa", "target": "tiny-random"}))
    from draftsmith.models import load_drafter

    d = load_drafter(str(tmp_path), tiny_target)
    assert d.heads.shared_lm_head is tiny_target.model.get_output_embeddings()
    assert torch.equal(d.heads(x)[0], tiny_target.model.lm_head(x))


# --- the loss indexing -------------------------------------------------------------------------


def test_head_k_is_scored_on_token_t_plus_k_plus_1():
    from draftsmith.train.tasks.medusa import heads_loss_and_stats, label_positions

    torch.manual_seed(0)
    B, T, K, V = 2, 9, 3, 11
    ids = torch.randint(0, V, (B, T))
    loss_mask = (torch.rand(B, T) > 0.3).long()
    attn = torch.ones(B, T, dtype=torch.long)
    attn[1, 7:] = 0  # right padding
    all_logits = torch.randn(K, B, T, V)  # head k's logits at every position
    counted = label_positions(loss_mask, attn, K)
    select = counted.any(0)
    loss, stats = heads_loss_and_stats(all_logits[:, select], counted, select, ids, decay=0.8, ranks=True)
    # brute force: every (head, position) whose label token t+k+1 is real and masked in
    expected, n1, hits1 = 0.0, 0, 0
    for k in range(1, K + 1):
        terms = []
        for b in range(B):
            for t in range(T):
                j = t + k + 1
                if j < T and loss_mask[b, j] and attn[b, j] and attn[b, t]:
                    terms.append(torch.nn.functional.cross_entropy(all_logits[k - 1, b, t], ids[b, j]))
                    if k == 1:
                        n1 += 1
                        hits1 += int(all_logits[0, b, t].argmax() == ids[b, j])
        expected += 0.8**k * torch.stack(terms).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert stats["num_tokens"] == n1
    assert stats["head1_top1"] == pytest.approx(hits1 / n1) == stats["head1_rank0"] == stats["top1_agreement"]
    assert stats["head2_top5"] == pytest.approx(sum(stats[f"head2_rank{r}"] for r in range(5)))
    # distill: head k at t against softmax(target_logits[t+k])
    target_logits = torch.randn(B, T, V)
    loss_d, _ = heads_loss_and_stats(all_logits[:, select], counted, select, ids, 0.8, target_logits)
    expected_d = 0.0
    for k in range(1, K + 1):
        b, t = counted[k - 1].nonzero(as_tuple=True)
        p = target_logits[b, t + k].softmax(-1)
        expected_d += 0.8**k * -(p * all_logits[k - 1, b, t].log_softmax(-1)).sum(-1).mean()
    assert loss_d.item() == pytest.approx(expected_d.item(), rel=1e-5)


# --- proposals ---------------------------------------------------------------------------------


def test_chain_and_tree_proposals_follow_the_heads(tiny_target, heads):
    d = Medusa(heads, tiny_target, "test")
    ids = tiny_target.tokenizer("hello there")["input_ids"]
    hidden = hidden_of(tiny_target, ids)
    d.start(torch.tensor([ids]), 64, hidden)
    head_logits = heads(hidden[-1])  # [K, V]
    seq = torch.tensor([ids + [5]])
    p = d.propose(seq, 3, GREEDY, None)
    assert p.probs is None and p.tokens.tolist() == head_logits[:3].argmax(-1).tolist()
    # tree from choices: node (0, 1) holds head 2's second-ranked token
    choices = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 1, 2))
    p = d.propose(seq, 4, GREEDY, None, tree=TreeConfig(choices=choices))
    ranked = head_logits.topk(3, dim=-1).indices
    for i, path in enumerate(p.tree.paths[1:]):
        assert p.tokens[i] == ranked[len(path) - 1, path[-1]], path
    assert p.tree.paths[1:] == tuple(sorted(choices, key=lambda c: (len(c), c)))
    # sampled children: distinct tokens per depth, q rows from the right head, seeded
    s = SamplingConfig(temperature=1.0)
    g = torch.Generator().manual_seed(0)
    cfg = TreeConfig(topk=3, depth=2, children="sampled")
    p = d.propose(seq, 4, s, g, tree=cfg)
    assert p.probs is not None and len(p.probs) == len(p.tokens) == p.tree.num_nodes
    q = torch.softmax(head_logits.float(), -1)
    for depth in (1, 2):
        nodes = [i for i, path in enumerate(p.tree.paths[1:]) if len(path) == depth]
        by_rank = {p.tree.paths[i + 1][-1]: int(p.tokens[i]) for i in nodes}
        assert len(set(by_rank.values())) == len(by_rank)  # without replacement
        for i in nodes:
            assert torch.allclose(p.probs[i], q[depth - 1], atol=1e-6)
    # the proposal is a function of the generator
    again = d.propose(seq, 4, s, torch.Generator().manual_seed(0), tree=cfg)
    assert again.tokens.tolist() == p.tokens.tolist()


def test_tree_from_accuracies_and_prior(tiny_target, heads, caplog):
    d = Medusa(heads, tiny_target, "test")
    t = d.tree_for(TreeConfig(topk=2, depth=3, num_draft_tokens=8))
    assert t.num_nodes == 7 and t.depth <= 3 and all(r < 2 for p in t.paths for r in p)
    assert "prior" in caplog.text  # no measured accuracies in these heads
    heads.config.head_accuracies = [[0.9, 0.05] + [0.0] * 8, [0.8, 0.1] + [0.0] * 8, [0.7] + [0.0] * 9, [0.1] * 10]
    d2 = Medusa(heads, tiny_target, "measured")
    assert d2.tree_for(TreeConfig(depth=3, num_draft_tokens=4)).paths[1:] == ((0,), (0, 0), (0, 0, 0))


def test_bad_requests_are_clear_errors(tiny_target, heads):
    d = Medusa(heads, tiny_target, "test")
    ids = [3, 4, 5]
    d.start(torch.tensor([ids]), 32, hidden_of(tiny_target, ids))
    seq = torch.tensor([ids + [6]])
    with pytest.raises(
        DraftsmithError, match=r"-k/--num-speculative-tokens 5: .*\(4 heads\) drafts at most 4 tokens per step"
    ):
        d.propose(seq, 5, GREEDY, None)
    with pytest.raises(DraftsmithError, match="depth 5"):
        d.propose(seq, 4, GREEDY, None, tree=TreeConfig(topk=2, depth=5))
    with pytest.raises(DraftsmithError, match="depth 5"):
        d.propose(
            seq, 4, GREEDY, None, tree=TreeConfig(choices=((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0, 0)))
        )
    with pytest.raises(DraftsmithError, match="sampled"):
        d.propose(seq, 4, GREEDY, None, tree=TreeConfig(topk=2, depth=2, children="sampled"))


def test_bad_checkpoints_are_clear_errors(tiny_target, tmp_path):
    from draftsmith.models import load_drafter, write_drafter_meta

    wrong = tmp_path / "wrong"
    MedusaHeads(MedusaConfig(hidden_size=576, vocab_size=tiny_target.vocab_size, num_heads=2)).save_pretrained(wrong)
    write_drafter_meta(wrong, "medusa", "smollm2-135m-instruct")
    with pytest.raises(DraftsmithError, match="trained for hidden size 576, the target tiny-random has 64"):
        load_drafter(str(wrong), tiny_target)
    corrupt = tmp_path / "corrupt"
    MedusaHeads.from_target(tiny_target.model, 2).save_pretrained(corrupt)
    write_drafter_meta(corrupt, "medusa", "tiny-random")
    (corrupt / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(DraftsmithError, match="could not load the weights"):
        load_drafter(str(corrupt), tiny_target)


# --- decoding through the engine -----------------------------------------------------------------


@pytest.mark.parametrize(
    "tree",
    [
        TreeConfig(choices=((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0))),
        TreeConfig(topk=2, depth=3, num_draft_tokens=8),
        TreeConfig(topk=2),
    ],
    ids=["choices", "topk", "topk-only"],
)
def test_greedy_tree_decoding_through_the_engine_equals_plain(tiny_target, heads, tree):
    """Medusa's trees (the chain is tests/test_contract.py's)."""
    d = Medusa(heads, tiny_target, "test")
    prompt = tiny_target.tokenizer("hello there, how are")["input_ids"]
    engine = Engine(tiny_target, d, 3, tree=tree)
    spec = engine.generate(prompt, 30, eos_token_ids=())
    plain = engine.generate(prompt, 30, eos_token_ids=(), speculative=False)
    assert spec.tokens == plain.tokens


# --- training through the real trainer ---------------------------------------------------------


@pytest.fixture
def target_spy(monkeypatch):
    """Fingerprints of the trainer's own target (base weights, LoRA excluded) before and after train()."""
    from draftsmith.train.trainer import loop as trainer_mod

    seen = {}
    original = trainer_mod.Trainer.train

    def spy(self):
        seen["before"] = fingerprint(self.target.model, skip=("lora_",))
        out = original(self)
        seen["after"] = fingerprint(self.target.model, skip=("lora_",))
        seen["lora_b"] = [
            p.detach().abs().sum().item() for n, p in self.target.model.named_parameters() if "lora_B" in n
        ]
        seen["lrs"] = [g["initial_lr"] for g in self.optimizer.param_groups]
        return out

    monkeypatch.setattr(trainer_mod.Trainer, "train", spy)
    return seen


def test_medusa1_training(tiny_target, tmp_path, fresh_accelerate, target_spy):
    from draftsmith.models import load_drafter

    s = train_recipe(TINY1, tmp_path, "--optim.max_steps=24", "--logging.log_every=4", "--checkpoint.save_every=12")
    curve = [h["train/loss"] for h in s["history"] if "train/loss" in h]
    assert curve[-1] < 0.7 * curve[0], curve
    logged = next(h for h in s["history"] if "train/loss" in h)
    assert {f"train/head{k}_{m}" for k in range(1, 5) for m in ("top1", "top5")} <= set(logged)
    assert s["eval"]["eval/head1_top1"] > 0 and "eval/head4_rank9" in s["eval"]
    final = tmp_path / "final"
    meta = json.loads((final / "drafter.json").read_text())
    assert meta["kind"] == "medusa" and meta["target"] == "tiny-random" and meta["medusa_version"] == 1
    assert "eval" not in meta
    config = json.loads((final / "config.json").read_text())
    acc = config["head_accuracies"]
    assert len(acc) == 4 and all(len(row) == 10 for row in acc)
    assert acc[0][0] == pytest.approx(s["eval"]["eval/head1_rank0"])
    assert json.loads((tmp_path / "step-0000012" / "config.json").read_text())["head_accuracies"] is None  # no eval yet
    from safetensors.torch import load_file

    assert all(k.startswith(("blocks.", "lm_heads.")) for k in load_file(final / "model.safetensors"))
    d = load_drafter(str(final), tiny_target)
    assert isinstance(d, Medusa) and d.heads.config.head_accuracies == acc
    assert d.heads.blocks[0][0].linear.weight.abs().sum() > 0  # trained weights, not re-initialised
    assert target_spy["before"] == target_spy["after"] and not target_spy["lora_b"]  # the target is frozen
    assert s["acceptance"]["mean_acceptance_length"] >= 1.0  # the live heads ran in the engine


def test_medusa2_training_changes_the_target_only_through_lora(tiny_target, tmp_path, fresh_accelerate, target_spy):
    pytest.importorskip("peft")
    from draftsmith.models import Target, load_drafter

    # regenerate=false: the tiny target's own replies take minutes to generate on 2 cores
    s = train_recipe(
        TINY2,
        tmp_path,
        "--optim.max_steps=4",
        "--logging.log_every=2",
        "--data.regenerate=false",
        "--logging.acceptance_prompts=0",
        "--data.max_rows=60",
    )
    assert target_spy["before"] == target_spy["after"]  # base weights frozen
    assert target_spy["lora_b"] and any(v > 0 for v in target_spy["lora_b"])  # adapters trained
    assert target_spy["lrs"] == pytest.approx([2e-3, 8e-3])  # LoRA at optim.lr, heads x heads_lr_multiplier
    assert all("train/lm_loss" in h for h in s["history"] if "train/loss" in h)
    final = tmp_path / "final"
    meta = json.loads((final / "drafter.json").read_text())
    assert meta["target_path"] == "target" and meta["base_target"] == "tiny-random" and meta["medusa_version"] == 2
    assert (final / "target_adapter" / "adapter_config.json").is_file()
    from safetensors.torch import load_file

    assert all(k.startswith(("blocks.", "lm_heads.")) for k in load_file(final / "model.safetensors"))
    tuned = Target.load(str(final / "target"))
    assert not any("lora" in n for n, _ in tuned.model.named_parameters())
    assert fingerprint(tuned.model) != fingerprint(tiny_target.model)  # LoRA merged in
    d = load_drafter(str(final), tuned)
    assert isinstance(d, Medusa) and d.heads.config.medusa_version == 2


def test_medusa2_needs_lora(tmp_path):
    with pytest.raises(DraftsmithError, match="lora.r must be > 0"):
        load_recipe(TINY2, ["--drafter.lora.r=0"])
    with pytest.raises(DraftsmithError, match="drafter.labels"):
        load_recipe(TINY1, ["--drafter.labels=soft"])


def test_medusa2_refuses_zero3(tiny_target, monkeypatch):
    from draftsmith.train.tasks.medusa import MedusaTask

    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")  # what `accelerate launch` sets for zero3.yaml
    with pytest.raises(DraftsmithError, match="ZeRO-3"):
        MedusaTask(load_recipe(TINY2).drafter, tiny_target)
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", '{"zero_optimization": {"stage": 3}}')  # a DeepSpeed config
    with pytest.raises(DraftsmithError, match="ZeRO-3"):
        MedusaTask(load_recipe(TINY2).drafter, tiny_target)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["smollm2-135m-instruct/medusa.yaml", "smollm2-135m-instruct/medusa2.yaml"])
def test_real_recipe_two_steps(recipe, tmp_path, fresh_accelerate):
    from draftsmith.models.sources import resolve_model
    from draftsmith.train.trainer.loop import train

    r = load_recipe(
        ROOT / "configs" / recipe,
        [
            "--optim.max_steps=2",
            "--optim.batch_size=1",
            "--optim.grad_accum=1",
            "--data.max_length=64",
            "--data.max_rows=40",
            "--data.eval_rows=4",
            "--data.regenerate=false",
            "--logging.progress=false",
            "--logging.eval_batches=1",
            "--logging.acceptance_prompts=1",
            "--logging.acceptance_max_new_tokens=8",
            f"--checkpoint.output_dir={tmp_path}",
        ],
    )
    try:
        resolve_model(r.model.target)
    except DraftsmithError as e:
        pytest.skip(str(e))
    s = train(r)
    assert s["steps"] == 2 and json.loads((tmp_path / "final" / "drafter.json").read_text())["kind"] == "medusa"
    assert s["acceptance"]["mean_acceptance_length"] >= 1.0
