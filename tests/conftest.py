"""Shared fixtures: the built-in `tiny-random` target (seeded, built once per session into a
temporary cache so tests never depend on what a developer's ~/.cache holds)."""

import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))
# `--dtype auto` is the CLI's default; exactness (greedy equality, the law tests) is checked in fp32,
# where a batched verify cannot flip the target's own argmax. tests/test_hardware.py unsets it.
os.environ.setdefault("DRAFTSMITH_DTYPE_AUTO", "float32")


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("draftsmith-cache")
    old = os.environ.get("DRAFTSMITH_CACHE")
    os.environ["DRAFTSMITH_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("DRAFTSMITH_CACHE", None)
    else:
        os.environ["DRAFTSMITH_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_target(tiny_cache):
    from draftsmith.models import Target

    return Target.load("tiny-random", dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def tiny(tiny_target, tmp_path_factory):
    """kind name -> (the drafter its factory built, its --draft value, that value loaded again);
    each built once per session."""
    from draftsmith.kinds import KINDS
    from draftsmith.models import load_drafter
    from draftsmith.testing import tiny_drafter

    built = {}

    def get(name):
        if name not in built:
            folder = tmp_path_factory.mktemp(f"tiny-{name}") / "draft"
            drafter, spec = tiny_drafter(KINDS[name], tiny_target, folder)
            built[name] = drafter, spec, load_drafter(spec, tiny_target)
        return built[name]

    return get


@pytest.fixture
def fresh_accelerate():
    """accelerate keeps process-wide singletons; each in-process run starts from a clean slate."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def recorded_compile():
    """A stand-in for models.target.compile_decode (CUDA graphs need a GPU): the forward it
    returns runs eagerly and records (input length, logits_to_keep) of every call."""
    shapes = []

    def record(forward):
        def run(**kw):
            shapes.append((kw["input_ids"].shape[1], kw["logits_to_keep"]))
            return forward(**kw)

        return run

    return record, shapes


@pytest.fixture
def counting_compile(monkeypatch):
    """models/target.py's compile_decode as torch.compile(fullgraph, dynamic=False) with
    aot_eager (dynamo's tracing, guards and functionalisation are real, code generation is
    skipped), recording the input shapes of every graph it compiles."""
    from torch._dynamo.backends.registry import lookup_backend

    from draftsmith.models import base as base_mod

    graphs: list[tuple] = []

    def backend(gm, example_inputs):
        graphs.append(tuple(tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)))
        return lookup_backend("aot_eager")(gm, example_inputs)

    def compile_decode(forward):
        return torch.compile(forward, backend=backend, dynamic=False, fullgraph=True)

    torch._dynamo.reset()
    monkeypatch.setattr(base_mod, "compile_decode", compile_decode)
    yield graphs
    torch._dynamo.reset()
