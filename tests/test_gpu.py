"""CUDA-only paths: static cache + compiled (CUDA-graph) decode. Skipped without a GPU."""

import pytest
import torch

from draftsmith.infer import Engine
from draftsmith.kinds import KINDS
from draftsmith.models import Target, load_drafter

K = 3  # the chain length the CUDA twins run at (at most a kind's cap)
# A repeat at the end of each prompt gives a lookup drafter something to find.
PROMPTS = ([5, 40, 41, 42, 43, 9, 12, 5, 40], [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30, 31, 7, 8, 9])

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_compiled_cuda_decode_matches_eager_and_plain(tiny_cache):
    eager = Target.load("tiny-random", dtype="float32", device="cuda", compile=False)
    compiled = Target.load("tiny-random", dtype="float32", device="cuda", compile=True)
    prompt = [5, 6, 7, 8, 9]
    ref = Engine(eager).generate(prompt, 32, eos_token_ids=()).tokens
    for target in (eager, compiled):
        engine = Engine(target, load_drafter("truncated:4", target), 3)
        assert engine.generate(prompt, 32, speculative=False, eos_token_ids=()).tokens == ref
        assert engine.generate(prompt, 32, eos_token_ids=()).tokens == ref


def test_compiled_cuda_tree_verification_matches_plain(tiny_cache):
    """Tree attention mask + positions + compaction through the CUDA-graph path."""
    from draftsmith.infer.tree import TreeConfig
    from draftsmith.models.medusa import Medusa, MedusaHeads

    compiled = Target.load("tiny-random", dtype="float32", device="cuda", compile=True)
    heads = MedusaHeads.from_target(compiled.model, num_heads=3, num_layers=1, share_lm_head=False)
    drafter = Medusa(heads.to("cuda"), compiled, "untrained")
    _chain_and_tree_match_plain(compiled, drafter, TreeConfig(topk=2, depth=3, num_draft_tokens=8))


def _chain_and_tree_match_plain(target, drafter, tree) -> None:
    prompt = [5, 6, 7, 8, 9]
    ref = Engine(target).generate(prompt, 32, eos_token_ids=()).tokens
    for shape in (None, tree):
        assert Engine(target, drafter, 3, tree=shape).generate(prompt, 32, eos_token_ids=()).tokens == ref


def test_compiled_cuda_eagle_dynamic_tree_matches_plain(tiny_cache):
    """EAGLE-3 drafting on CUDA (its own KV cache, dynamic tree masks) through the CUDA-graph verify."""
    from draftsmith.infer.tree import TreeConfig
    from draftsmith.models.eagle import EagleConfig
    from draftsmith.models.eagle3 import Eagle3, Eagle3Config, Eagle3Model, default_aux_layers

    compiled = Target.load("tiny-random", dtype="float32", device="cuda", compile=True)
    c = compiled.config
    torch.manual_seed(0)
    model = Eagle3Model(
        Eagle3Config(
            vocab_size=compiled.vocab_size,
            draft_vocab_size=128,
            hidden_layers=default_aux_layers(c.num_hidden_layers),
            **EagleConfig.layer_fields(c),
        )
    )
    model.set_vocab(torch.arange(0, 256, 2), compiled.model.get_output_embeddings())
    drafter = Eagle3(model.to("cuda"), compiled, "untrained")
    _chain_and_tree_match_plain(compiled, drafter, TreeConfig(topk=3, depth=3, num_draft_tokens=10))


@pytest.mark.parametrize("name", list(KINDS))
def test_compiled_cuda_drafting_matches_eager(tiny, name):
    """Every registered kind's drafting as CUDA graphs: outputs == plain decoding and the same
    acceptance as the eager drafter, with acceptance forced through every count 0..k so the
    drafter meets every catch-up count (the CPU twin, with a counting backend, is the contract
    suite's compiled-drafting test in tests/test_contract.py)."""
    from draftsmith.infer.proposal import speculative_cap
    from draftsmith.testing import Forced

    _, spec, _ = tiny(name)  # the kind's tiny checkpoint, written once on the CPU
    runs = {}
    for compile in (False, True):
        target = Target.load("tiny-random", dtype="float32", device="cuda", compile=compile)
        drafter = load_drafter(spec, target)
        k = min(K, speculative_cap(drafter) or K)
        for prompt in PROMPTS:
            plain = Engine(target).generate(prompt, 24, speculative=False, eos_token_ids=())
            got = Engine(target, Forced(drafter, plain.tokens, len(prompt), k), k).generate(
                prompt, 24, eos_token_ids=()
            )
            assert got.tokens == plain.tokens, f"{name} compile={compile}: output differs from plain decoding"
            runs.setdefault(compile, []).append((got.metrics.drafts, got.metrics.accepted_tokens))
    assert runs[True] == runs[False], f"{name}: compiled drafting accepted differently from eager"
