"""A draft LM's draft vocabulary (FR-Spec): the trainer writes the most frequent target ids beside
the weights, the runtime drafts over those rows of the LM head only, and decoding stays exact
(greedy equal to plain, the target's law kept); engines and transformers see the whole head."""

from __future__ import annotations

import json

import pytest
import torch
from lawtest import chisquare_pvalue, engine_samples, exact_law
from test_train import run

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.models import DraftLM, load_drafter
from draftsmith.models.checkpoint import checkpoint_identity
from draftsmith.models.draft_lm import DRAFT_VOCAB, read_draft_vocab, write_draft_vocab
from draftsmith.shipping.crosscheck import full_vocabulary

SAMPLING = SamplingConfig(temperature=1.0, top_k=3)


@pytest.fixture(scope="module")
def trained(tiny_cache, tmp_path_factory):
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    out = tmp_path_factory.mktemp("draft-vocab")
    run(out, "--optim.max_steps=12", "--checkpoint.save_every=100", "--drafter.draft_vocab_size=96")
    return out / "final"


def test_training_writes_the_most_frequent_ids_and_the_runtime_drafts_over_them(trained, tiny_target):
    meta = json.loads((trained / "drafter.json").read_text())
    assert meta["draft_vocab_size"] == 96
    ids = read_draft_vocab(trained, tiny_target.vocab_size, tiny_target.vocab_size)
    assert ids.numel() == 96 and set(tiny_target.eos_token_ids) <= set(ids.tolist())
    drafter = load_drafter(str(trained), tiny_target)
    assert torch.equal(drafter.draft_ids.cpu(), ids)
    assert drafter.model.get_output_embeddings().weight.shape[0] == 96
    # the rows kept are the full head's rows for those ids
    full = DraftLM.from_pretrained(str(trained), tiny_target, draft_vocab=False)
    assert full.draft_ids is None and full.model.get_output_embeddings().weight.shape[0] == tiny_target.vocab_size
    assert torch.equal(drafter.model.get_output_embeddings().weight, full.model.get_output_embeddings().weight[ids])

    engine = Engine(tiny_target, drafter, 4)
    prompt = tiny_target.tokenizer("hello there, how are")["input_ids"]
    spec = engine.generate(prompt, 24, eos_token_ids=())
    assert spec.tokens == engine.generate(prompt, 24, speculative=False, eos_token_ids=()).tokens
    assert spec.metrics.drafts > 0 and spec.metrics.accepted_tokens > 0
    drafter.start(torch.tensor([prompt[:-1]]), 64)  # the engine feeds the last token with the first draft
    proposal = drafter.propose(torch.tensor([prompt]), 4, SamplingConfig())
    assert set(proposal.tokens.flatten().tolist()) <= set(ids.tolist())


def test_transformers_assisted_generation_gets_the_whole_head(trained, tiny_target):
    drafter = load_drafter(str(trained), tiny_target)
    assistant = drafter.as_assistant_model()
    assert assistant.get_output_embeddings().weight.shape[0] == tiny_target.vocab_size
    assert drafter.model.get_output_embeddings().weight.shape[0] == 96  # the runtime's copy is untouched
    ids = torch.tensor([tiny_target.tokenizer("hello there")["input_ids"]])
    out = tiny_target.model.generate(ids, assistant_model=assistant, max_new_tokens=10, do_sample=False)
    assert out.tolist() == tiny_target.model.generate(ids, max_new_tokens=10, do_sample=False).tolist()


def test_sampling_with_a_draft_vocabulary_keeps_the_target_law(trained, tiny_target):
    drafter = load_drafter(str(trained), tiny_target)
    prompt = [40, 41, 42, 43, 40, 41, 42, 43]
    law = exact_law(tiny_target, prompt, 3, SAMPLING)
    counts, accepted, drafted = engine_samples(Engine(tiny_target, drafter, 2), prompt, law, SAMPLING, 300)
    assert drafted > 0 and accepted > 0
    assert chisquare_pvalue(counts, law) > 1e-3


def test_engines_and_the_checkpoint_identity_see_the_file(trained, tiny_target, tmp_path):
    # not a *.safetensors file: engines load every one in the folder as weights
    assert not DRAFT_VOCAB.endswith(".safetensors") and (trained / DRAFT_VOCAB).is_file()
    drafter = full_vocabulary(load_drafter(str(trained), tiny_target))
    assert drafter.draft_ids is None
    assert drafter.model.get_output_embeddings().weight.shape[0] == tiny_target.vocab_size
    before = checkpoint_identity(trained)["sha256"]
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in trained.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    assert checkpoint_identity(copy)["sha256"] == before
    write_draft_vocab(copy, torch.arange(0, 192, 2))
    assert checkpoint_identity(copy)["sha256"] != before  # another vocabulary is another drafter


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not a readable draft vocabulary"),
        ('{"ids": [1, 2]}', "not a readable draft vocabulary"),
        ('{"draft_ids": [1.5, 2]}', "list of token ids"),
        ('{"draft_ids": [5, 3, 9]}', "increasing order"),
        ('{"draft_ids": [1, 2, 100000]}', "written for another model"),
    ],
)
def test_a_bad_draft_vocabulary_is_one_clear_error(trained, tiny_target, tmp_path, text, message):
    folder = tmp_path / "draft"
    folder.mkdir()
    for f in trained.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / DRAFT_VOCAB).write_text(text)
    with pytest.raises(DraftsmithError, match=message):
        load_drafter(str(folder), tiny_target)


def test_a_training_model_keeps_its_whole_head(tiny_target, tiny):
    _, spec, _ = tiny("draft_lm")
    model = DraftLM.from_pretrained(spec, tiny_target).model.train()
    with pytest.raises(DraftsmithError, match="frozen draft"):
        DraftLM(model, tiny_target, "live", freeze=False, draft_ids=torch.arange(10))
