"""EAGLE-1/2/3: training-time test vs step-by-step drafting, dynamic trees, draft vocabularies,
training, checkpoints and decoding on the tiny target."""

from __future__ import annotations

import json

import pytest
import torch
from lawtest import chisquare_pvalue, engine_samples, exact_law

from draftsmith.errors import DraftsmithError
from draftsmith.infer.engine import Engine
from draftsmith.infer.sampling import GREEDY, SamplingConfig
from draftsmith.infer.tree import TreeConfig
from draftsmith.models import load_drafter
from draftsmith.models.eagle import Eagle, EagleConfig, EagleModel
from draftsmith.models.eagle3 import (
    Eagle3,
    Eagle3Config,
    Eagle3Model,
    check_vocab,
    default_aux_layers,
    frequent_tokens,
    vocab_maps,
)
from draftsmith.train.config import load_recipe
from draftsmith.train.features import target_hidden_states
from draftsmith.train.tasks.eagle import simulated_acceptance_length
from draftsmith.train.tasks.eagle3 import Eagle3Task


def _eagle(target, version: int, seed: int = 0, draft_vocab: int = 100):
    torch.manual_seed(seed)
    fields = EagleConfig.layer_fields(target.config)
    if version == 1:
        model = EagleModel(EagleConfig(vocab_size=target.vocab_size, target="tiny", hidden_layers=[-1], **fields))
        return Eagle(model.float(), target, "test-eagle")
    aux = default_aux_layers(target.config.num_hidden_layers)
    model = Eagle3Model(
        Eagle3Config(
            vocab_size=target.vocab_size, draft_vocab_size=draft_vocab, hidden_layers=aux, target="tiny", **fields
        )
    )
    ids = torch.randperm(target.vocab_size)[:draft_vocab].sort().values
    model.set_vocab(ids, target.model.get_output_embeddings())
    return Eagle3(model.float(), target, "test-eagle3")


def _stepwise(drafter, ids: torch.Tensor, feats: torch.Tensor, steps: int) -> dict:
    """Reference: the runtime's cached draft forward, one row and one step at a time.
    out[(j, t)] = the output of step j at row t (token t+1+j at position t+j)."""
    model, T, out = drafter.model, ids.shape[0], {}
    for t in range(T - 1):
        drafter.start(ids[None], T + steps + 2, hidden=feats)
        rows = torch.arange(t + 1)
        span = drafter._span  # masks span the whole cache: shapes fixed per query count
        o = drafter._run(ids[1 : t + 2], model.fuse(feats[: t + 1]), rows, rows, span[None] <= rows[:, None])[-1:]
        out[(0, t)] = o[0]
        for j in range(1, min(steps, T - 1 - t)):
            slot = torch.tensor([t + j])
            o = drafter._run(ids[t + 1 + j].view(1), o, slot, slot, (span <= t + j)[None])
            out[(j, t)] = o[0]
    return out


@pytest.mark.parametrize("version", [1, 3])
def test_training_time_test_forward_equals_step_by_step_drafting(tiny_target, version):
    drafter = _eagle(tiny_target, version)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, tiny_target.vocab_size, (2, 12), generator=g)
    feats = target_hidden_states(tiny_target.model, ids, torch.ones_like(ids), drafter.hidden_layers).hidden
    steps = 4
    with torch.no_grad():
        outs = drafter.model(ids, feats, num_steps=steps)
        for b in range(2):
            ref = _stepwise(drafter, ids[b], feats[b], steps)
            for (j, t), o in ref.items():
                torch.testing.assert_close(outs[j][b, t], o, atol=1e-5, rtol=1e-5)
    assert len(ref) > 30


def test_unrolled_eagle3_loss_equals_step_by_step_reference(tiny_target):
    cfg = load_recipe("configs/tiny/eagle3.yaml", ["--drafter.ttt_steps=3", "--drafter.draft_vocab_size=100"]).drafter
    task = Eagle3Task(cfg, tiny_target)
    torch.manual_seed(0)
    task.model.set_vocab(
        torch.randperm(tiny_target.vocab_size)[:100].sort().values, tiny_target.model.get_output_embeddings()
    )
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, tiny_target.vocab_size, (2, 10), generator=g)
    loss_mask = torch.ones_like(ids)
    loss_mask[1, 6:] = 0  # scoring stops where the reply ends
    batch = {"input_ids": ids, "loss_mask": loss_mask, "attention_mask": torch.ones_like(ids), "row": torch.arange(2)}
    loss, stats = task.loss(task.model, batch, step=0)

    drafter = Eagle3(task.model, tiny_target, "ref", freeze=False)
    feats = target_hidden_states(tiny_target.model, ids, torch.ones_like(ids), task.layers, want_logits=True)
    aux = feats.hidden[..., : 3 * tiny_target.config.hidden_size]
    total = 0.0
    with torch.no_grad():
        for j in range(3):
            terms = []
            for b in range(2):
                ref = _stepwise(drafter, ids[b], aux[b], 3)
                for t in range(10):
                    if t + j + 2 < 10 and loss_mask[b, t + j + 2]:  # token t+2+j is scored
                        logits = task.model.draft_logits(ref[(j, t)]).float()
                        p = feats.logits[b, t + 1 + j, task.model.draft_to_target].float().softmax(-1)
                        terms.append(-(p * logits.log_softmax(-1)).sum())
            total += 0.8**j * float(torch.stack(terms).mean())
    assert loss.item() == pytest.approx(total, rel=1e-4)
    assert stats["num_tokens"] == 8 + 4


def test_simulated_acceptance_length_counts_leading_hits():
    correct = torch.tensor([[[1, 1, 0]], [[1, 0, 1]], [[0, 1, 1]]], dtype=torch.bool)  # [K=3, B=1, T=3]
    rows = torch.tensor([[True, True, True]])
    assert simulated_acceptance_length(correct, rows) == pytest.approx(1 + (2 + 1 + 0) / 3)


@pytest.mark.parametrize("version", [1, 3])
def test_dynamic_tree_nodes_are_the_draft_top_k_along_their_paths(tiny_target, version):
    drafter = _eagle(tiny_target, version, seed=3)
    prompt = torch.tensor([[5, 17, 33, 2, 40, 41, 42, 9]])
    feats = target_hidden_states(tiny_target.model, prompt, torch.ones_like(prompt), drafter.hidden_layers).hidden[0]
    drafter.start(prompt, 64, hidden=feats)
    seq = torch.cat([prompt, torch.tensor([[7]])], 1)
    captured = {}
    catch_up = drafter._catch_up
    drafter._catch_up = lambda s: captured.setdefault("last", catch_up(s))
    cfg = TreeConfig(topk=3, depth=3, num_draft_tokens=20)  # of 3 + 9 + 9 candidates: some at depth 3
    with torch.no_grad():
        proposal = drafter.propose(seq, 3, GREEDY, None, tree=cfg)
        tree, tokens = proposal.tree, proposal.tokens.tolist()
        assert tree.num_nodes == 19 and tree.depth == 3 and not tree.is_chain
        c, n = drafter._rows, seq.shape[1]
        for node in range(1, tree.num_nodes + 1):
            path = tree.path_to(node)
            h = captured["last"]
            for i, anc in enumerate(path[:-1]):  # the ancestors, drafted as a plain chain
                slot = torch.tensor([c + i])
                h = drafter._run(
                    torch.tensor([tokens[anc - 1]]), h, torch.tensor([n - 1 + i]), slot, (drafter._span <= c + i)[None]
                )
            ranked = drafter.model.target_ids(drafter.model.draft_logits(h)[0].topk(3).indices).tolist()
            assert ranked[tree.ranks[node]] == tokens[node - 1]


def test_draft_vocabulary_maps_build_under_another_device_context():
    """A bench that builds its models under `with torch.device("cuda")` made the maps there beside
    CPU ids (it stopped on an H200); the meta device stands in for the GPU here."""
    ids = torch.tensor([2, 5, 6, 40, 258])
    with torch.device("meta"):
        d2t, t2d = vocab_maps(ids, 259)
    assert d2t.device.type == t2d.device.type == "cpu"
    assert (torch.arange(5) + d2t).tolist() == ids.tolist()


def test_draft_vocabulary_maps_round_trip_and_refuse_another_target():
    ids = torch.tensor([2, 5, 6, 40, 258])
    d2t, t2d = vocab_maps(ids, 259)
    assert (torch.arange(5) + d2t).tolist() == ids.tolist()
    assert t2d.nonzero().flatten().tolist() == ids.tolist()
    check_vocab(d2t, t2d, 259, "ckpt")
    with pytest.raises(DraftsmithError, match="vocabulary of 259 tokens.*this target has 300"):
        check_vocab(d2t, t2d, 300, "ckpt")
    with pytest.raises(DraftsmithError, match="outside the target's vocabulary"):
        vocab_maps(torch.tensor([1, 300]), 259)
    bad = t2d.clone()
    bad[7] = True
    with pytest.raises(DraftsmithError, match="disagree"):
        check_vocab(d2t, bad, 259, "ckpt")
    counts = torch.tensor([[9, 9, 9, 4, 4, 1, 0]])
    picked = frequent_tokens(counts, torch.ones_like(counts), 20, 3, always=[17])
    assert picked.tolist() == [4, 9, 17]


def test_eagle_trees_are_dynamic_only(tiny_target):
    drafter = _eagle(tiny_target, 1)
    engine = Engine(tiny_target, drafter, 3, tree=TreeConfig(choices=((0,), (1,))))
    with pytest.raises(DraftsmithError, match="--tree-topk"):
        engine.generate([5, 6, 7], 4)


# --- trained tiny drafts -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_cache):
    """EAGLE-1 and EAGLE-3 drafts trained briefly on the tiny target (the tiny recipes, shortened)."""
    from draftsmith.train.trainer.loop import train

    out = {}
    for kind in ("eagle", "eagle3"):
        folder = tmp_path_factory.mktemp(kind)
        recipe = load_recipe(
            f"configs/tiny/{kind}.yaml",
            [
                "--optim.max_steps=24",
                "--logging.eval_every=12",
                "--checkpoint.save_every=100",
                "--logging.progress=false",
            ],
        )
        recipe.checkpoint.output_dir = str(folder)
        out[kind] = (folder, train(recipe))
    return out


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_trains_saves_reloads_and_decodes_like_plain(tiny_target, trained, kind):
    folder, summary = trained[kind]
    losses = [h["train/loss"] for h in summary["history"] if "train/loss" in h]
    assert losses[-1] < 0.8 * losses[0]
    ev = summary["eval"]
    assert 1.0 <= ev["eval/simulated_acceptance_length"] <= 1 + 3
    assert summary["acceptance"]["mean_acceptance_length"] >= 1.0  # the real one, through the runtime
    final = folder / "final"
    names = (
        json.loads((final / "model.safetensors.index.json").read_text())["weight_map"]
        if (final / "model.safetensors.index.json").exists()
        else None
    )
    from safetensors import safe_open

    with safe_open(str(final / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert not any("embed" in n for n in names)  # the target's embedding is borrowed, never saved
    if kind == "eagle3":
        assert {"d2t", "t2d", "fc.weight", "midlayer.hidden_norm.weight", "lm_head.weight", "norm.weight"} <= set(names)
    else:
        assert {"fc.weight", "layers.0.self_attn.q_proj.weight"} <= set(names) and "lm_head.weight" not in names
    drafter = load_drafter(str(final), tiny_target)
    assert drafter.kind == kind
    # RoPE's inv_freq is a non-persistent buffer, not in the checkpoint: loading must recompute it,
    # not keep whatever that memory held (acceptance then depended on what had run before)
    fresh = type(drafter.model)(drafter.model.config).rotary
    assert torch.equal(drafter.model.rotary.inv_freq.cpu(), fresh.inv_freq)
    assert torch.equal(drafter.model.rotary.original_inv_freq.cpu(), fresh.inv_freq)
    prompt = [5, 40, 41, 42, 43, 9, 12]
    for tree in (TreeConfig(topk=3, depth=3, num_draft_tokens=10),):  # the chain: tests/test_contract.py
        engine = Engine(tiny_target, drafter, 3, tree=tree)
        plain = engine.generate(prompt, 40, speculative=False, eos_token_ids=())
        spec = engine.generate(prompt, 40, eos_token_ids=())
        assert spec.tokens == plain.tokens


def test_dynamic_tree_sampling_follows_the_target_distribution(tiny_target, trained):
    # EAGLE-2: the EAGLE-1 draft expanding dynamic trees, verified by EAGLE-2's scheme.
    drafter = load_drafter(str(trained["eagle"][0] / "final"), tiny_target)
    sampling = SamplingConfig(temperature=1.0, top_k=3)
    prompt = [40, 41, 42, 43]
    engine = Engine(tiny_target, drafter, 2, tree=TreeConfig(topk=3, depth=2, num_draft_tokens=8))
    law = exact_law(tiny_target, prompt, 3, sampling)
    n = 600
    counts, accepted, _ = engine_samples(engine, prompt, law, sampling, n)
    # the test exercises acceptance, not just the fallback samples (one in six draws or more: the
    # briefly trained draft on whole-conversation rows accepts 141 of 600 here)
    assert accepted > n / 6
    assert chisquare_pvalue(counts, law) > 1e-3


def test_eagle_checkpoint_errors_are_clear(tiny_target, trained, tmp_path):
    import shutil

    final = trained["eagle3"][0] / "final"
    broken = tmp_path / "broken"
    shutil.copytree(final, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(DraftsmithError, match="could not load the weights"):
        load_drafter(str(broken), tiny_target)
    cfg = json.loads((final / "config.json").read_text())
    cfg["hidden_layers"] = [2, 4, 40]
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DraftsmithError, match="hidden layers .*40"):
        load_drafter(str(broken), tiny_target)
    with pytest.raises(DraftsmithError, match="aux_layers"):
        Eagle3Task(load_recipe("configs/tiny/eagle3.yaml", ["--drafter.aux_layers=[2, 9]"]).drafter, tiny_target)


def test_side_by_side_bench_reports_each_domain(tiny_target, trained):
    from draftsmith.evaluation.bench import Method, format_compare, run_compare
    from draftsmith.evaluation.prompts import Prompt

    drafter = load_drafter(str(trained["eagle"][0] / "final"), tiny_target)
    methods = [
        Method("eagle_k3", drafter, 3),
        Method("eagle2_tree", drafter, 3, TreeConfig(topk=2, depth=3, num_draft_tokens=6)),
    ]
    prompts = [
        Prompt([5, 40, 41, 42], "a", "chat"),
        Prompt([7, 8, 9, 10, 11], "b", "code"),
        Prompt([60, 61, 62], "c", "code"),
    ]
    result = run_compare(tiny_target, methods, prompts, 12, GREEDY, progress=False)
    for name in ("plain", "eagle_k3", "eagle2_tree"):
        row = result["methods"][name]
        assert set(row["by_domain"]) == {"chat", "code"}
        assert row["outputs_match_plain"] is True
    assert result["methods"]["plain"]["by_domain"]["code"]["speedup"] == pytest.approx(1.0)
    assert result["methods"]["eagle2_tree"]["drafted_tokens"] == 5 * result["methods"]["eagle2_tree"]["drafts"]
    assert "by domain" in format_compare(result)


def test_ttt_attention_equals_dense_attention_over_its_key_sets():
    """The grouped (no key copies) training-time-test attention == plain softmax attention in
    which query t at step j sees step 0's keys 0..t and its own keys of steps 1..j, with each KV
    head repeated for its G query heads (GQA)."""
    from draftsmith.models.layers import ttt_attention

    torch.manual_seed(0)
    B, H, KV, T, hd, steps = 2, 6, 2, 5, 4, 3
    past = [(torch.randn(B, KV, T, hd), torch.randn(B, KV, T, hd)) for _ in range(steps)]
    q = torch.randn(B, H, T, hd)
    got = ttt_attention(q, past)
    rep = lambda x: x.repeat_interleave(H // KV, dim=1)  # noqa: E731
    want = torch.empty_like(got)
    for t in range(T):
        keys = torch.cat([rep(past[0][0])[:, :, : t + 1]] + [rep(k)[:, :, t : t + 1] for k, _ in past[1:]], 2)
        vals = torch.cat([rep(past[0][1])[:, :, : t + 1]] + [rep(v)[:, :, t : t + 1] for _, v in past[1:]], 2)
        w = (q[:, :, t : t + 1] @ keys.transpose(-1, -2) * hd**-0.5).softmax(-1)
        want[:, :, t] = (w @ vals)[:, :, 0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("at", ["label", "input", "feature"])
def test_scored_positions_follow_the_loss_mask_alignment(at):
    """Row t at step j is scored on the target's law at t+1+j; the loss mask is read at token
    t+2+j (label), t+1+j (input: speculators) or t+j (feature: eagle-llm). Brute force."""
    from draftsmith.train.tasks.eagle import scored_positions

    g = torch.Generator().manual_seed(3)
    B, T, steps = 2, 11, 3
    mask = (torch.rand(B, T, generator=g) > 0.4).long()
    attn = torch.ones(B, T, dtype=torch.long)
    attn[1, 8:] = 0  # a padded row
    got = scored_positions(mask, attn, steps, at)
    read = {"label": 2, "input": 1, "feature": 0}[at]
    for j in range(steps):
        for b in range(B):
            for t in range(T):
                last = max(t + 1 + j, t + read + j)  # the target's law and the masked token both exist
                want = last < T and bool(attn[b, last]) and bool(attn[b, t]) and bool(mask[b, t + read + j])
                assert bool(got[j, b, t]) == want, (at, j, b, t)
    assert got.any()


class _Rows:
    """The training rows bind_data reads: input_ids, loss_mask, and items for collate."""

    def __init__(self, ids):
        self.input_ids, self.loss_mask = ids, torch.ones_like(ids)

    def __len__(self):
        return self.input_ids.shape[0]

    def __getitem__(self, i):
        ids = self.input_ids[i]
        return {"input_ids": ids, "loss_mask": torch.ones_like(ids), "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize("reference", [False, True])
def test_eagle3_switches_reproduce_speculators_choices(tiny_target, reference):
    """scale_fc false keeps the plain FC init; train_lm_head false freezes the LM head (still
    started from the target's rows); the defaults scale the FC and train the head."""
    overrides = ["--drafter.draft_vocab_size=100"]
    if reference:
        overrides += ["--drafter.scale_fc=false", "--drafter.train_lm_head=false", "--drafter.loss_mask_at=input"]
    cfg = load_recipe("configs/tiny/eagle3.yaml", overrides).drafter
    torch.manual_seed(0)
    task = Eagle3Task(cfg, tiny_target)
    fc = task.model.fc.weight.detach().clone()
    data = type("Data", (), {"train": _Rows(torch.randint(3, tiny_target.vocab_size, (4, 12)))})()
    task.bind_data(data, None)
    head = tiny_target.model.get_output_embeddings().weight
    torch.testing.assert_close(task.model.lm_head.weight, head[task.model.draft_to_target])
    assert torch.equal(task.model.fc.weight, fc) == reference
    trainable = {id(p) for p in task.trainable_parameters()}
    assert (id(task.model.lm_head.weight) in trainable) != reference
    assert task.model.lm_head.weight.requires_grad != reference


def test_eagle3_loss_norm_and_out_of_vocab_rows(tiny_target):
    """loss_norm positions divides a step's sum by B*T instead of its scored rows;
    score_out_of_vocab false drops the rows whose target top-1 the draft cannot propose."""
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, tiny_target.vocab_size, (2, 12), generator=g)
    batch = {"input_ids": ids, "loss_mask": torch.ones_like(ids), "attention_mask": torch.ones_like(ids)}

    def run(*overrides):
        cfg = load_recipe("configs/tiny/eagle3.yaml", ["--drafter.ttt_steps=1", *overrides]).drafter
        torch.manual_seed(0)
        task = Eagle3Task(cfg, tiny_target)
        size = task.model.config.draft_vocab_size
        step = 2 if size < tiny_target.vocab_size else 1
        vocab = torch.arange(0, tiny_target.vocab_size, step)[:size]
        task.model.set_vocab(vocab, tiny_target.model.get_output_embeddings())
        loss, stats = task.loss(task.model, batch, step=0)
        return float(loss.detach()), stats["num_tokens"]

    tokens, n = run("--drafter.draft_vocab_size=100")
    positions, _ = run("--drafter.draft_vocab_size=100", "--drafter.loss_norm=positions")
    assert positions * ids.numel() == pytest.approx(tokens * n, rel=1e-5)
    assert n < ids.numel()
    skipped, _ = run("--drafter.draft_vocab_size=100", "--drafter.score_out_of_vocab=false")
    assert skipped != pytest.approx(tokens, rel=1e-3)  # the even-id vocabulary misses some top-1s
    full, _ = run(f"--drafter.draft_vocab_size={tiny_target.vocab_size}")
    full_skipped, _ = run(f"--drafter.draft_vocab_size={tiny_target.vocab_size}", "--drafter.score_out_of_vocab=false")
    assert full_skipped == pytest.approx(full, rel=1e-6)
