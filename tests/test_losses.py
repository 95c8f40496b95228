"""Distillation losses (train/losses.py) against brute-force float64 formulas, plus masking,
shift, vocabulary padding and a tiny training run per loss kind. CPU, seeded, seconds."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from draftsmith.kinds import KINDS as DRAFTER_KINDS
from draftsmith.train.losses import (
    KINDS,
    cross_entropy,
    distillation_loss,
    divergence,
    expected_acceptance_length,
)

DIVS = ("fkl", "rkl", "jsd", "tvd")


def _probs(row: list[float], temperature: float) -> list[float]:
    vals = [x / temperature for x in row]
    top = max(vals)
    exps = [math.exp(v - top) for v in vals]  # exp(-inf) = 0: masked entries
    total = sum(exps)
    return [e / total for e in exps]


def _kl(a: list[float], b: list[float]) -> float:
    return sum(x * math.log(x / y) for x, y in zip(a, b) if x > 0)


def _reference(draft: torch.Tensor, target: torch.Tensor, kind: str, t: float, beta: float) -> list[float]:
    out = []
    for d_row, t_row in zip(draft.double().tolist(), target.double().tolist()):
        p, q = _probs(t_row, t), _probs(d_row, t)
        if kind == "fkl":
            out.append(_kl(p, q))
        elif kind == "rkl":
            out.append(_kl(q, p))
        elif kind == "tvd":
            out.append(0.5 * sum(abs(x - y) for x, y in zip(p, q)))
        else:
            m = [beta * x + (1 - beta) * y for x, y in zip(p, q)]
            out.append(beta * _kl(p, m) + (1 - beta) * _kl(q, m))
    return out


def _close(got: torch.Tensor, want: list[float]) -> None:
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-4, atol=1e-5)


_CASES = [(k, t, b) for k in DIVS for t in (0.5, 1.0, 2.0) for b in ((0.1, 0.5, 0.9) if k == "jsd" else (0.5,))]


@pytest.mark.parametrize("kind,temperature,beta", _CASES)
def test_divergence_matches_reference(kind: str, temperature: float, beta: float) -> None:
    g = torch.Generator().manual_seed(0)
    draft, target = 3 * torch.randn(5, 7, generator=g), 3 * torch.randn(5, 7, generator=g)
    _close(divergence(draft, target, kind, temperature, beta), _reference(draft, target, kind, temperature, beta))


@pytest.mark.parametrize("kind", DIVS)
def test_zero_when_equal_and_bounds(kind: str) -> None:
    g = torch.Generator().manual_seed(1)
    logits = 4 * torch.randn(6, 9, generator=g)
    logits[:, -2:] = float("-inf")
    assert divergence(logits, logits.clone(), kind).abs().max() < 1e-6
    # Near-disjoint distributions push every divergence towards its upper bound.
    draft, target = 30 * torch.randn(50, 9, generator=g), 30 * torch.randn(50, 9, generator=g)
    for beta in (0.05, 0.5, 0.8):
        d = divergence(draft, target, kind, beta=beta)
        assert torch.isfinite(d).all() and (d >= -1e-6).all()
        if kind == "tvd":
            assert d.max() <= 1 + 1e-6
        if kind == "jsd":  # JSD_beta <= H(beta, 1 - beta)
            assert d.max() <= -beta * math.log(beta) - (1 - beta) * math.log(1 - beta) + 1e-5


def test_jsd_limits_are_forward_and_reverse_kl() -> None:
    g = torch.Generator().manual_seed(2)
    draft, target = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    fkl, rkl = divergence(draft, target, "fkl"), divergence(draft, target, "rkl")
    eps = 1e-3
    torch.testing.assert_close(divergence(draft, target, "jsd", beta=eps) / eps, fkl, rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(divergence(draft, target, "jsd", beta=1 - eps) / eps, rkl, rtol=2e-2, atol=1e-4)


# (kinds whose true value is finite for this masking, draft mask, target mask)
_MASKS = [(DIVS, [5, 6], [5, 6]), (("fkl", "jsd", "tvd"), [], [0, 6]), (("rkl", "jsd", "tvd"), [1, 2], [])]


@pytest.mark.parametrize("kinds,draft_mask,target_mask", _MASKS)
def test_masked_vocab_and_large_logits(kinds: tuple[str, ...], draft_mask: list[int], target_mask: list[int]) -> None:
    g = torch.Generator().manual_seed(3)
    for scale in (1.0, 1e4):  # 1e4: softmax underflows to exact zeros in float32
        draft, target = scale * torch.randn(4, 7, generator=g), scale * torch.randn(4, 7, generator=g)
        draft[:, draft_mask], target[:, target_mask] = float("-inf"), float("-inf")
        for kind in kinds:
            d, t = draft.clone().requires_grad_(), target.clone().requires_grad_()
            out = divergence(d, t, kind, temperature=0.7)
            assert torch.isfinite(out).all()
            if scale == 1.0:
                _close(out.detach(), _reference(draft, target, kind, 0.7, 0.5))
            out.sum().backward()
            assert torch.isfinite(d.grad).all() and torch.isfinite(t.grad).all()
            assert (d.grad[:, draft_mask] == 0).all()


def test_bf16_inputs_use_float32_math() -> None:
    g = torch.Generator().manual_seed(4)
    draft, target = torch.randn(3, 50, generator=g).bfloat16(), torch.randn(3, 50, generator=g).bfloat16()
    for kind in DIVS:
        _close(divergence(draft, target, kind), _reference(draft, target, kind, 1.0, 0.5))
    assert cross_entropy(draft, torch.tensor([0, 1, 2])).dtype == torch.float32


def test_errors_name_the_problem() -> None:
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="'kl'.*fkl, rkl, jsd, tvd"):
        divergence(x, x, "kl")
    with pytest.raises(ValueError, match="cross_entropy"):
        divergence(x, x, "ce")
    for beta in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="beta"):
            divergence(x, x, "jsd", beta=beta)
    with pytest.raises(ValueError, match="temperature"):
        divergence(x, x, "fkl", temperature=0.0)
    with pytest.raises(ValueError, match="shape"):
        divergence(x, torch.zeros(2, 4), "fkl")
    ids, mask, logits = torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), torch.zeros(1, 3, 5)
    with pytest.raises(ValueError, match="'wasserstein'.*ce"):
        distillation_loss(logits, logits, ids, mask, kind="wasserstein")
    with pytest.raises(ValueError, match="target_logits"):
        distillation_loss(logits, None, ids, mask, kind="rkl")
    with pytest.raises(ValueError, match="shape"):
        distillation_loss(logits, logits, ids, torch.ones(1, 4))
    assert KINDS == ("fkl", "rkl", "jsd", "tvd", "ce")


def test_cross_entropy_matches_torch() -> None:
    g = torch.Generator().manual_seed(5)
    logits, labels = torch.randn(6, 11, generator=g), torch.randint(0, 11, (6,), generator=g)
    torch.testing.assert_close(cross_entropy(logits, labels), F.cross_entropy(logits, labels, reduction="none"))


def test_shift_convention_by_hand() -> None:
    # Sequence [0, 1, 2], only token 2 is a training target: position 1 (which predicts it) counts.
    ids, mask = torch.tensor([[0, 1, 2]]), torch.tensor([[0, 0, 1]])
    draft = torch.tensor([[[5.0, 0.0, 0.0], [0.0, 1.0, 2.0], [9.0, 0.0, 0.0]]])
    target = torch.tensor([[[0.0, 5.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 9.0]]])
    loss, stats = distillation_loss(draft, target, ids, mask, kind="ce")
    torch.testing.assert_close(loss, -torch.log_softmax(draft[0, 1], -1)[2])
    loss, stats = distillation_loss(draft, target, ids, mask, kind="fkl")
    torch.testing.assert_close(loss, divergence(draft[0, 1:2], target[0, 1:2], "fkl")[0])
    p, q = torch.softmax(target[0, 1], -1), torch.softmax(draft[0, 1], -1)
    assert stats["num_tokens"] == 1.0 and stats["top1_agreement"] == 0.0
    assert stats["token_acceptance"] == pytest.approx(float(torch.minimum(p, q).sum()))
    assert stats["loss"] == pytest.approx(float(loss))


def _batch(seed: int, vd: int = 10, vt: int = 10) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    draft, target = 2 * torch.randn(3, 8, vd, generator=g), 2 * torch.randn(3, 8, vt, generator=g)
    ids = torch.randint(0, min(vd, vt), (3, 8), generator=g)
    mask = torch.rand(3, 8, generator=g) < 0.5
    mask[0, 1] = True
    return draft, target, ids, mask


@pytest.mark.parametrize("kind", KINDS)
def test_uncounted_positions_do_not_matter(kind: str) -> None:
    draft, target, ids, mask = _batch(6)
    base, stats = distillation_loss(draft, target, ids, mask, kind=kind, temperature=1.5)
    counted = torch.zeros_like(mask)
    counted[:, :-1] = mask[:, 1:]
    noise = 10 * torch.randn(draft.shape, generator=torch.Generator().manual_seed(7))
    draft2 = torch.where(counted[..., None], draft, draft + noise).requires_grad_()
    target2 = torch.where(counted[..., None], target, target - noise)
    loss, _ = distillation_loss(draft2, target2, ids, mask, kind=kind, temperature=1.5)
    torch.testing.assert_close(loss, base)
    loss.backward()
    assert (draft2.grad[~counted] == 0).all() and draft2.grad[counted].abs().sum() > 0
    assert stats["num_tokens"] == float(counted.sum())


@pytest.mark.parametrize("kind", KINDS)
def test_empty_mask_gives_zero_with_grad(kind: str) -> None:
    draft, target, ids, _ = _batch(8)
    draft[..., 0] = float("-inf")
    draft.requires_grad_()
    mask = torch.zeros(3, 8, dtype=torch.long)
    mask[:, 0] = 1  # the first token is never predicted, so this still counts nothing
    loss, stats = distillation_loss(draft, target, ids, mask, kind=kind)
    assert loss.item() == 0.0 and stats["num_tokens"] == 0.0
    assert all(math.isfinite(v) for v in stats.values())
    loss.backward()
    assert torch.equal(draft.grad, torch.zeros_like(draft))


@pytest.mark.parametrize("kind", DIVS)
def test_vocab_padding_is_truncated(kind: str) -> None:
    draft, target, ids, mask = _batch(9, vd=12, vt=10)
    loss, stats = distillation_loss(draft, target, ids, mask, kind=kind)
    want, want_stats = distillation_loss(draft[..., :10], target, ids, mask, kind=kind)
    torch.testing.assert_close(loss, want)
    assert stats == want_stats
    loss, stats = distillation_loss(target, draft, ids, mask, kind=kind)  # target padded instead
    want, want_stats = distillation_loss(target, draft[..., :10], ids, mask, kind=kind)
    torch.testing.assert_close(loss, want)
    assert stats == want_stats


def test_ce_on_shifted_tokens_without_target() -> None:
    draft, _, ids, mask = _batch(10)
    loss, stats = distillation_loss(draft, None, ids, mask, kind="ce")
    sel = mask[:, 1:]
    want = F.cross_entropy(draft[:, :-1][sel], ids[:, 1:][sel])
    torch.testing.assert_close(loss, want)
    assert set(stats) == {"loss", "num_tokens"}


def test_acceptance_stats_of_identical_models() -> None:
    draft, _, ids, mask = _batch(11)
    loss, stats = distillation_loss(draft, draft.clone(), ids, mask, kind="tvd", temperature=3.0)
    assert loss.item() < 1e-6
    assert stats["token_acceptance"] == pytest.approx(1.0) and stats["top1_agreement"] == 1.0


def test_expected_acceptance_length() -> None:
    assert expected_acceptance_length(0.0, 5) == 1.0
    assert expected_acceptance_length(1.0, 4) == 5.0
    assert expected_acceptance_length(0.5, 3) == pytest.approx(1.875)
    assert expected_acceptance_length(0.8, 7) == pytest.approx((1 - 0.8**8) / 0.2)
    assert expected_acceptance_length(0.9, 0) == 1.0
    with pytest.raises(ValueError):
        expected_acceptance_length(1.2, 3)


class _Bigram(torch.nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


@pytest.mark.parametrize("kind", KINDS)
def test_training_a_tiny_draft_reduces_loss(kind: str) -> None:
    vocab, g = 24, torch.Generator().manual_seed(12)
    table = 3 * torch.randn(vocab, vocab, generator=g)  # the fixed "target" bigram model
    ids = torch.zeros(8, 33, dtype=torch.long)  # sequences sampled from the target itself
    ids[:, 0] = torch.randint(0, vocab, (8,), generator=g)
    for t in range(1, ids.shape[1]):
        ids[:, t] = torch.multinomial(torch.softmax(table[ids[:, t - 1]], -1), 1, generator=g)[:, 0]
    mask = torch.ones_like(ids)
    mask[:, :4] = 0  # a "prompt" that is not trained on
    target_logits = table[ids]
    torch.manual_seed(0)
    draft = _Bigram(vocab, 16)
    opt = torch.optim.Adam(draft.parameters(), lr=0.05)
    history = []
    for _ in range(40):
        loss, stats = distillation_loss(draft(ids), target_logits, ids, mask, kind=kind)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(stats)
    first, last = history[0], history[-1]
    assert last["loss"] < 0.7 * first["loss"], (first, last)
    assert last["token_acceptance"] > first["token_acceptance"] + 0.3, (first, last)


def test_heads_on_counted_rows_only_give_the_full_logits_loss_and_gradients(tiny_target):
    """Issue 17 (training throughput): the draft LM task runs both LM heads on the counted rows
    only (head_on_rows); loss, stats and gradients equal distillation_loss over full logits."""
    from draftsmith.train.losses import head_on_rows
    from draftsmith.train.tasks.draft_lm import DraftLMTask, DraftLMTrainConfig

    task = DraftLMTask(DraftLMTrainConfig(init="truncated:1", loss="fkl"), tiny_target)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (3, 16), generator=g)
    mask = (torch.rand(3, 16, generator=g) < 0.6).long()
    attn = torch.ones_like(ids)
    attn[2, 12:] = 0
    mask[2, 12:] = 0
    batch = {"input_ids": ids, "loss_mask": mask, "attention_mask": attn}
    loss, stats = task.loss(task.model, batch, step=0)
    loss.backward()
    fast = {n: p.grad.clone() for n, p in task.model.named_parameters() if p.grad is not None}
    task.model.zero_grad(set_to_none=True)
    full = task.model(input_ids=ids, attention_mask=attn, use_cache=False).logits
    with torch.no_grad():
        target = tiny_target.model(input_ids=ids, attention_mask=attn, use_cache=False).logits
    want, want_stats = distillation_loss(full, target, ids, mask, "fkl")
    want.backward()
    torch.testing.assert_close(loss, want)
    assert stats.keys() == want_stats.keys() and all(stats[k] == pytest.approx(want_stats[k], rel=1e-5) for k in stats)
    for n, p in task.model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(fast[n], p.grad, rtol=1e-4, atol=1e-6)
    rows = torch.zeros(3, 16, dtype=torch.bool)
    rows[0, 3] = rows[2, 0] = True
    with torch.no_grad(), head_on_rows(tiny_target.model, rows):
        got = tiny_target.model(input_ids=ids, attention_mask=attn, use_cache=False).logits
    assert got.shape == (1, 2, target.shape[-1])
    torch.testing.assert_close(got[0], target[rows])
    assert tiny_target.model.get_output_embeddings()._forward_pre_hooks == {}  # removed on exit


# --- drafter.divergence: one switch for every kind, and the data it trains on -----------------


def test_soft_loss_fkl_is_the_soft_cross_entropy_with_the_gradient_of_kl() -> None:
    from draftsmith.train.losses import log_probs, soft_loss

    g = torch.Generator().manual_seed(5)
    draft = torch.randn(6, 9, generator=g, dtype=torch.float64).float().requires_grad_(True)
    target = torch.randn(6, 9, generator=g)
    p = target.softmax(-1)
    ce = soft_loss(draft, log_probs(target), "fkl")
    torch.testing.assert_close(ce, -(p * draft.log_softmax(-1)).sum(-1))
    entropy = -(p * p.log()).sum(-1)
    torch.testing.assert_close(ce - entropy, divergence(draft, target, "fkl"), atol=1e-5, rtol=1e-5)
    (g_ce,) = torch.autograd.grad(ce.sum(), draft)
    (g_kl,) = torch.autograd.grad(divergence(draft, target, "fkl").sum(), draft)
    torch.testing.assert_close(g_ce, g_kl, atol=1e-6, rtol=1e-5)
    for kind in ("rkl", "jsd", "tvd"):
        torch.testing.assert_close(soft_loss(draft, log_probs(target), kind), divergence(draft, target, kind))
    # tvd's value is 1 - the probability that a token drafted from q is accepted (sum_x min(p, q))
    accept = torch.minimum(p, draft.softmax(-1)).sum(-1)
    torch.testing.assert_close(soft_loss(draft, log_probs(target), "tvd"), 1 - accept, atol=1e-6, rtol=1e-5)
    assert soft_loss(draft, log_probs(target).requires_grad_(True), "tvd").grad_fn is not None


TINY_RECIPES = "configs/tiny/{}.yaml"

# The kinds, from the registry: what each one's recipe dataclass declares, never a name.
TRAINABLE = [name for name, k in DRAFTER_KINDS.items() if k.trainable]


def _fields(kind: str) -> set[str]:
    return {f.name for f in dataclasses.fields(DRAFTER_KINDS[kind].config)}


def _takes_ce(kind: str) -> bool:
    """Cross-entropy on the data's tokens is one of the kind's divergences (its checks pass it)."""
    return all(ok for ok, _ in DRAFTER_KINDS[kind].config(divergence="ce").checks())


def _distill(kind: str) -> list[str]:
    """The override that makes a kind with a `labels` choice train on the target's distribution."""
    return ["--drafter.labels=distill"] if "labels" in _fields(kind) else []


@pytest.mark.parametrize("kind", TRAINABLE)
def test_every_kind_takes_one_divergence_switch(kind: str) -> None:
    from draftsmith.train.config import load_recipe

    distill = _distill(kind)
    for div in DIVS:
        assert (
            load_recipe(TINY_RECIPES.format(kind), [f"--drafter.divergence={div}", *distill]).drafter.divergence == div
        )
    from draftsmith.errors import DraftsmithError

    with pytest.raises(DraftsmithError, match="config key 'drafter.divergence': 'kl' is not one of"):
        load_recipe(TINY_RECIPES.format(kind), ["--drafter.divergence=kl"])
    if _takes_ce(kind):  # cross-entropy on the data's tokens: the draft LM's and PARD's only
        assert load_recipe(TINY_RECIPES.format(kind), ["--drafter.divergence=ce"]).drafter.divergence == "ce"
    else:
        with pytest.raises(DraftsmithError, match="'ce' is not one of fkl, rkl, jsd, tvd"):
            load_recipe(TINY_RECIPES.format(kind), ["--drafter.divergence=ce"])


@pytest.mark.parametrize("kind", [name for name in TRAINABLE if "loss" in _fields(name)])
def test_the_old_loss_key_still_works_with_a_warning(kind: str) -> None:
    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import load_recipe

    with pytest.warns(FutureWarning, match="'drafter.loss' is deprecated"):
        r = load_recipe(TINY_RECIPES.format(kind), ["--drafter.loss=tvd"])
    assert r.drafter.divergence == "tvd" and r.drafter.loss is None
    with pytest.warns(FutureWarning), pytest.raises(DraftsmithError, match="disagree"):
        load_recipe(TINY_RECIPES.format(kind), ["--drafter.loss=tvd", "--drafter.divergence=rkl"])


def test_token_labels_refuse_a_divergence_they_would_not_use() -> None:
    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import load_recipe

    with pytest.raises(DraftsmithError, match="set drafter.labels: distill"):
        load_recipe("configs/tiny/medusa.yaml", ["--drafter.divergence=tvd", "--drafter.labels=tokens"])


def _tiny_batch(vocab: int, seed: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, 24), generator=g)
    loss_mask = torch.ones_like(ids)
    loss_mask[:, :4] = 0
    return {"input_ids": ids, "loss_mask": loss_mask, "attention_mask": torch.ones_like(ids), "row": torch.arange(2)}


@pytest.mark.parametrize("kind", [name for name in TRAINABLE if not _takes_ce(name)])
def test_each_soft_label_kind_trains_on_the_divergence_it_is_given(kind, tiny_target, monkeypatch) -> None:
    """The task's loss goes through losses.soft_loss with the recipe's divergence (tvd here), and
    its value is that divergence: below the fkl run's cross-entropy, gradients flowing."""
    from draftsmith.kinds import KINDS
    from draftsmith.train import losses
    from draftsmith.train.config import load_recipe

    distill = _distill(kind)
    seen = []
    real = losses.soft_loss

    def spy(draft_logits, target_logp, divergence_kind, beta=0.5):
        seen.append(divergence_kind)
        return real(draft_logits, target_logp, divergence_kind, beta)

    monkeypatch.setattr(losses, "soft_loss", spy)
    values = {}
    for div in ("fkl", "tvd"):
        cfg = load_recipe(TINY_RECIPES.format(kind), [f"--drafter.divergence={div}", *distill]).drafter
        task = KINDS[kind].task(cfg, tiny_target, seed=0)
        batch = _tiny_batch(tiny_target.vocab_size)
        loss, _ = task.loss(task.model, batch, step=0)
        loss.backward()
        assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in task.trainable_parameters())
        values[div] = float(loss.detach())
    assert set(seen) == {"fkl", "tvd"}
    assert 0 <= values["tvd"] < values["fkl"]  # TV <= 1 per position; the soft CE of a random draft is far above


def test_on_policy_batch_is_sampled_by_the_draft_and_scored_by_the_target(tiny_target, monkeypatch) -> None:
    """data.source on_policy: the tokens trained on are the draft's own continuation (near-greedy
    sampling here, so it can be recomputed), and the loss compares the draft with the target's
    law on exactly those tokens."""
    from draftsmith.kinds import KINDS
    from draftsmith.train import losses
    from draftsmith.train.config import load_recipe

    r = load_recipe(
        TINY_RECIPES.format("draft_lm"),
        ["--data.source=on_policy", "--drafter.on_policy_tokens=6", "--drafter.on_policy_temperature=1e-4"],
    )
    assert r.drafter.on_policy_fraction == 1.0  # every step on-policy unless a share is given
    task = KINDS["draft_lm"].task(r.drafter, tiny_target, seed=0)
    batch = _tiny_batch(tiny_target.vocab_size, seed=7)
    captured = {}
    real_batch, real_rows = task._on_policy_batch, losses.rows_loss

    def keep_batch(*a, **kw):
        captured["batch"] = real_batch(*a, **kw)
        return captured["batch"]

    def keep_rows(draft_rows, target_rows, labels, *a, **kw):
        captured["target_rows"], captured["labels"] = target_rows, labels
        return real_rows(draft_rows, target_rows, labels, *a, **kw)

    monkeypatch.setattr(task, "_on_policy_batch", keep_batch)
    monkeypatch.setattr(losses, "rows_loss", keep_rows)
    loss, _ = task.loss(task.model, batch, step=3)
    ids, loss_mask, attention = captured["batch"]
    cut = int((loss_mask[0] != 0).nonzero()[0])
    assert torch.equal(ids[:, :cut], batch["input_ids"][:, :cut])  # the data's prefix, then the draft's tokens
    with torch.no_grad():
        greedy = task.model.generate(
            input_ids=ids[:, :cut], attention_mask=torch.ones_like(ids[:, :cut]), do_sample=False, max_new_tokens=6
        )
    kept = loss_mask[:, cut:].bool()
    assert torch.equal(ids[:, cut:][kept], greedy[:, cut : ids.shape[1]][kept])
    # the target's law at the rows that predict the draft's tokens
    with torch.no_grad():
        law = tiny_target.model(input_ids=ids, attention_mask=attention).logits
    counted = loss_mask[:, 1:] != 0
    torch.testing.assert_close(captured["target_rows"], law[:, :-1][counted], atol=1e-4, rtol=1e-4)
    assert torch.equal(captured["labels"], ids[:, 1:][counted]) and bool(torch.isfinite(loss))


def test_data_source_switch() -> None:
    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import load_recipe

    assert load_recipe(TINY_RECIPES.format("draft_lm")).data.source == "corpus"
    r = load_recipe(TINY_RECIPES.format("eagle3"), ["--data.source=regenerated"])
    assert r.data.regenerate is True  # what train/data/build.py reads
    assert load_recipe(TINY_RECIPES.format("eagle3"), ["--data.regenerate=true"]).data.source == "regenerated"
    old = load_recipe(TINY_RECIPES.format("draft_lm"), ["--drafter.on_policy_fraction=0.5"])
    assert (old.data.source, old.drafter.on_policy_fraction) == ("on_policy", 0.5)
    with pytest.raises(DraftsmithError, match="data.source on_policy samples from the drafter"):
        load_recipe(TINY_RECIPES.format("eagle3"), ["--data.source=on_policy"])
    with pytest.raises(DraftsmithError, match="config key 'data.source': 'synthetic' is not one of"):
        load_recipe(TINY_RECIPES.format("draft_lm"), ["--data.source=synthetic"])


def test_tvd_barely_moves_a_draft_that_gives_the_targets_token_almost_nothing() -> None:
    """Why the SmolLM2 draft LM recipe distils with forward KL (configs/smollm2-135m-instruct/draft_lm.yaml):
    total variation's gradient on a token's logit is the draft's probability of that token times a
    bounded factor, so where the draft puts ~0 on the target's token it vanishes; forward KL's is
    q - p there, about -p. A draft far from the target (a truncated target's first layers) learns
    slowly under tvd; one that already agrees does not have this problem."""
    vocab = 1000
    target = torch.full((1, vocab), -10.0)
    target[0, 7] = 10.0  # the target is sure of token 7
    draft = torch.zeros(1, vocab)
    draft[0, 7] = -12.0  # the draft gives it ~e^-12 / vocab
    grads = {}
    for kind in ("tvd", "fkl"):
        logits = draft.clone().requires_grad_(True)
        divergence(logits, target, kind).sum().backward()
        grads[kind] = logits.grad[0, 7].item()
    q7, p7 = torch.softmax(draft, -1)[0, 7].item(), torch.softmax(target, -1)[0, 7].item()
    assert abs(grads["tvd"]) <= q7  # |dTV/dz_7| = q_7 |s_7 - E_q[s]| / 2 <= q_7
    assert grads["fkl"] == pytest.approx(q7 - p7, abs=1e-6)  # dKL(p||q)/dz_7 = q_7 - p_7
    assert abs(grads["tvd"]) < 1e-6 * abs(grads["fkl"])
