"""CUDA-only paths: static cache + compiled (CUDA-graph) decode. Skipped without a GPU."""

import pytest
import torch

from draftsmith.infer import Engine
from draftsmith.models import Target, load_drafter

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
