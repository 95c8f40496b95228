"""Packed rows mean what serving sees: a conversation packed after another one gives the same
target features, the same drafter predictions and the same loss as that conversation alone, for
every trainable kind and for the target's sdpa and eager attention (train/data/packing.py,
models/documents.py)."""

import numpy as np
import pytest
import torch

from draftsmith.kinds import KINDS
from draftsmith.testing import tiny_task
from draftsmith.train import losses
from draftsmith.train.data import collate
from draftsmith.train.data.packing import _pack, _pad
from draftsmith.train.features import OfflineFeatures, extract, num_hidden_states, target_hidden_states

LENGTH = 32
A, B = 10, 14  # the two conversations' lengths; B follows A in the packed row
TRAINABLE = [name for name, kind in KINDS.items() if kind.trainable]
# Per kind, what makes its loss deterministic and reported row by row: no input noise, every
# DFlash anchor and every PARD copy kept, Medusa scored on the target's law (losses.soft_loss).
OVERRIDES = {"eagle": {"noise": 0.0}, "dflash": {"num_blocks": 64}, "pard": {"retention": 1.0}}
OVERRIDES["medusa"] = {"labels": "distill"}


def _conversation(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    ids = g.integers(3, 250, n).astype(np.int32)
    mask = np.ones(n, np.uint8)
    mask[:3] = 0  # a prompt, then the reply
    return ids, mask


def _rows(a_scored: bool = False):
    """(packed: A then B in one row, alone: B by itself, padded to the same length); A's loss
    mask is cleared unless `a_scored`, so both rows train the same tokens."""
    stats = {k: 0 for k in ("train_truncated_tokens", "train_dropped_no_loss", "train_conversations")}
    a, b = _conversation(A, 1), _conversation(B, 2)
    packed = _pack([a, b], LENGTH, 0, dict(stats), "train")
    alone = _pad([b], LENGTH, 0, dict(stats), "train")
    if not a_scored:
        packed.loss_mask[0, :A] = 0
    return packed, alone


@pytest.fixture(params=["sdpa", "eager"])
def attention(request, tiny_target):
    """The target's attention implementation for one test (restored after it)."""
    model = tiny_target.model
    before = model.config._attn_implementation
    model.set_attn_implementation(request.param)
    yield request.param
    model.set_attn_implementation(before)


def test_packing_places_whole_conversations_with_their_own_positions():
    packed, alone = _rows(a_scored=True)
    assert len(packed) == 1 and packed.attention_mask[0].sum() == A + B
    expected = list(range(A)) + list(range(B)) + list(range(B, B + LENGTH - A - B))  # padding goes on counting
    assert packed.position_ids[0].tolist() == expected
    # No conversation's first token is a label: nothing of its own precedes it.
    assert packed.loss_mask[0, 0] == 0 and packed.loss_mask[0, A] == 0 and packed.loss_mask[0, A + 3] == 1
    assert torch.equal(alone.position_ids[0], torch.arange(LENGTH, dtype=torch.int32))


def test_the_target_s_features_of_a_packed_conversation_are_its_own(tiny_target, attention, tmp_path):
    packed, alone = _rows()
    layers = tuple(range(num_hidden_states(tiny_target.config)))
    p, s = collate([packed[0]]), collate([alone[0]])

    def features(batch, **kw):
        return target_hidden_states(tiny_target.model, batch["input_ids"], batch["attention_mask"], layers, **kw)

    own = features(s, position_ids=s["position_ids"]).hidden[0, :B]
    got = features(p, position_ids=p["position_ids"]).hidden[0, A : A + B]
    torch.testing.assert_close(got, own, atol=1e-5, rtol=1e-5)
    # What a row with one causal mask and running positions gave: the first conversation leaks in.
    leaked = features(p).hidden[0, A : A + B]
    assert not torch.allclose(leaked, own, atol=1e-3)
    # The offline cache stores the same features (train/features/extraction.py).
    extract(tiny_target, layers, packed, tmp_path / "cache", max_length=LENGTH, progress=False, dtype="float32")
    cached = OfflineFeatures(tmp_path / "cache", tiny_target, layers, LENGTH, packed)(p).hidden[0, A : A + B]
    torch.testing.assert_close(cached, own, atol=1e-5, rtol=1e-5)


def _recorded(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every (draft rows, target rows) pair a task hands to train/losses.py, in call order."""
    seen = []
    for name in ("soft_loss", "divergence", "rows_loss"):
        real = getattr(losses, name)

        def spy(draft, target, *a, _real=real, **kw):
            seen.append((draft.detach().clone(), None if target is None else target.detach().clone()))
            return _real(draft, target, *a, **kw)

        monkeypatch.setattr(losses, name, spy)
    return seen


def _task(name: str, target, **overrides):
    kind = KINDS[name]
    task = tiny_task(kind, target, **{**OVERRIDES.get(name, {}), **overrides})
    if hasattr(task, "_vocab_set") and not task._vocab_set:  # EAGLE-3: a draft vocabulary, as bind_data picks
        ids = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(0))
        task.model.set_vocab(
            ids[: task.model.config.draft_vocab_size].sort().values, target.model.get_output_embeddings()
        )
        task._vocab_set = True
    model = task.model
    if hasattr(model, "generate"):  # a transformers causal LM as the draft (draft_lm, PARD): the target's choice
        model.set_attn_implementation(target.model.config._attn_implementation)
    return task


def _compare(task, monkeypatch, packed, alone):
    seen = _recorded(monkeypatch)
    p, s = collate([packed[0]]), collate([alone[0]])
    loss_p, stats_p = task.loss(task.model, p, step=0)
    n = len(seen)
    loss_s, stats_s = task.loss(task.model, s, step=0)
    assert n > 0 and len(seen) == 2 * n  # the same calls, each scoring the same rows
    for (draft_p, target_p), (draft_s, target_s) in zip(seen[:n], seen[n:]):
        assert draft_p.shape == draft_s.shape and draft_p.shape[0] > 0
        torch.testing.assert_close(draft_p, draft_s, atol=1e-5, rtol=1e-4)  # the draft's per-position predictions
        if target_p is not None:
            torch.testing.assert_close(target_p, target_s, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(loss_p, loss_s, atol=1e-5, rtol=1e-5)
    assert stats_p["num_tokens"] == stats_s["num_tokens"] > 0


@pytest.mark.parametrize("name", TRAINABLE)
def test_each_kind_trains_a_packed_conversation_as_if_alone(name, tiny_target, attention, monkeypatch):
    """Its loss and every row it scores (the draft's logits, the target's law) are those of the
    conversation alone: no attention, position or label crosses into the conversation before it."""
    packed, alone = _rows()
    _compare(_task(name, tiny_target), monkeypatch, packed, alone)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_medusa2_s_adapted_target_reads_a_packed_conversation_alone(impl, monkeypatch):
    """Medusa-2 trains the target itself through LoRA (a fresh target: the adapter goes into it)."""
    from draftsmith.models import Target

    target = Target.load("tiny-random", dtype="float32", device="cpu")
    target.model.set_attn_implementation(impl)
    task = _task("medusa", target, mode="medusa2", labels="distill")
    packed, alone = _rows()
    _compare(task, monkeypatch, packed, alone)


def test_a_label_never_crosses_into_the_next_conversation():
    """With both conversations trained, the packed row scores exactly the labels the two rows alone
    score: A's last positions never predict B's first tokens."""
    from draftsmith.train.data.rows import batch_documents
    from draftsmith.train.tasks.medusa import label_positions

    def counted(rows, documents=True):
        b = collate([rows[0]])
        return label_positions(b["loss_mask"], b["attention_mask"], 3, batch_documents(b) if documents else None)

    stats = {k: 0 for k in ("train_truncated_tokens", "train_dropped_no_loss")}
    packed, alone_b = _rows(a_scored=True)
    alone_a = _pad([_conversation(A, 1)], LENGTH, 0, dict(stats), "train")
    got = counted(packed)
    assert torch.equal(got[:, 0, :A], counted(alone_a)[:, 0, :A])
    assert torch.equal(got[:, 0, A : A + B], counted(alone_b)[:, 0, :B])
    assert not got[:, 0, A + B :].any() and got.any()
    assert int(counted(packed, documents=False).sum()) > int(got.sum())  # one causal row: A predicts B
