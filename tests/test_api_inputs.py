"""The Python API refuses wrong arguments at its boundary (Engine(), Engine.generate,
SamplingConfig, TreeConfig, predicted_speedup) in one DraftsmithError line naming the argument,
the value and what is accepted, instead of a traceback from inside torch or a silent nonsense
result; and `--adaptive-k` without a draft is refused by generate and bench."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer.engine import Engine, predicted_speedup
from draftsmith.infer.sampling import SamplingConfig
from draftsmith.infer.tree import TreeConfig

PROMPT = [5, 40, 41, 42, 43]


@pytest.fixture(scope="module")
def eagle(tiny):
    return tiny("eagle3")[0]


def one_line(excinfo, *words):
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, DraftsmithError) and "\n" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize(
    "k, words",
    [("3", ("num_speculative_tokens", "'3'", "int")), (2.5, ("num_speculative_tokens", "2.5", "int")),
     (True, ("num_speculative_tokens", "True", "int"))],
)  # fmt: skip
def test_a_k_that_is_not_an_int_is_refused(tiny_target, eagle, k, words):
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, eagle, k)
    one_line(e, *words)


@pytest.mark.parametrize("k", [np.int64(3), torch.tensor(3).numpy()[()], 3])
def test_integer_scalars_are_accepted_for_k(tiny_target, eagle, k):
    engine = Engine(tiny_target, eagle, k)
    assert engine.k == 3 and type(engine.k) is int
    assert (
        engine.generate(PROMPT, 4, eos_token_ids=()).tokens
        == Engine(tiny_target).generate(PROMPT, 4, eos_token_ids=()).tokens
    )


def test_a_missing_target_or_verification_is_named(tiny_target, eagle):
    with pytest.raises(DraftsmithError) as e:
        Engine(None, eagle, 3)
    one_line(e, "target", "None")
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, eagle, 3, verification=None)
    one_line(e, "verification", "None", "lossless")
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, 3)
    one_line(e, "drafter", "3")


def test_adaptive_must_be_a_bool(tiny_target, eagle):
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, eagle, 3, adaptive="no")
    one_line(e, "adaptive", "'no'", "True or False")


def test_a_tree_mapping_builds_its_tree_config(tiny_target, eagle):
    engine = Engine(tiny_target, eagle, tree={"topk": 2, "depth": 2})
    assert engine.tree == TreeConfig(topk=2, depth=2)
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, eagle, tree={"width": 2})
    one_line(e, "tree", "width", "topk")
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target, eagle, tree=[2, 3])
    one_line(e, "tree", "TreeConfig", "[2, 3]")
    with pytest.raises(DraftsmithError) as e:
        TreeConfig(topk="2")
    one_line(e, "topk", "'2'", "int")


@pytest.mark.parametrize(
    "sampling, words",
    [
        ({"temperature": 0.5}, ("sampling", "SamplingConfig", "temperature")),
        (0.7, ("sampling", "0.7", "SamplingConfig")),
    ],
)
def test_generate_wants_a_sampling_config(tiny_target, sampling, words):
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target).generate(PROMPT, 4, sampling)
    one_line(e, *words)


@pytest.mark.parametrize("seed", ["a", -1, 2**64, 1.5, True])
def test_generate_wants_a_seed_the_cli_would_take(tiny_target, seed):
    with pytest.raises(DraftsmithError) as e:
        Engine(tiny_target).generate(PROMPT, 4, seed=seed)
    one_line(e, "seed", repr(seed))


def test_valid_seeds_still_decode(tiny_target):
    plain = Engine(tiny_target).generate(PROMPT, 4, eos_token_ids=())
    for seed in (None, 0, np.int64(7), 2**64 - 1):
        assert Engine(tiny_target).generate(PROMPT, 4, seed=seed, eos_token_ids=()).tokens == plain.tokens
    hot = SamplingConfig(temperature=1.0)
    sampled = {
        s: tuple(Engine(tiny_target).generate(PROMPT, 6, hot, seed=s, eos_token_ids=()).tokens) for s in range(6)
    }
    assert len(set(sampled.values())) > 1, "the seed must reach the sampler"
    assert sampled[3] == tuple(Engine(tiny_target).generate(PROMPT, 6, hot, seed=np.int64(3), eos_token_ids=()).tokens)
    assert sampled[0] == tuple(Engine(tiny_target).generate(PROMPT, 6, hot, seed=None, eos_token_ids=()).tokens)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"temperature": math.nan}, ("temperature", "nan")),
        ({"temperature": -0.5}, ("temperature", "-0.5", ">= 0")),
        ({"top_p": 0.0}, ("top_p", "(0, 1]")),
        ({"top_p": 1.5}, ("top_p", "1.5")),
        ({"top_k": -1}, ("top_k", "-1")),
    ],
)
def test_sampling_config_refuses_nonsense_in_one_line(kwargs, words):
    with pytest.raises(DraftsmithError) as e:
        SamplingConfig(**kwargs)
    one_line(e, *words)
    assert isinstance(e.value, ValueError)  # what callers caught before


@pytest.mark.parametrize(
    "args, word",
    [((2.0, 0, 0, 0), "t_verify"), ((-1, 1.0, 0.1, 1.0), "tau"), ((0.5, 1.0, 0.1, 1.0), "tau"),
     ((2.0, -1.0, 0.1, 1.0), "t_step"), ((2.0, 1.0, -0.1, 1.0), "t_draft_k"), ((math.nan, 1.0, 0.1, 1.0), "tau"),
     ((2.0, 1.0, 0.1, "1"), "t_verify")],
)  # fmt: skip
def test_predicted_speedup_refuses_what_it_cannot_predict(args, word):
    with pytest.raises(DraftsmithError) as e:
        predicted_speedup(*args)
    one_line(e, word)


def test_predicted_speedup_of_sound_costs_is_unchanged():
    assert predicted_speedup(2.0, 1.0, 0.5, 1.5) == pytest.approx(1.0)
    assert predicted_speedup(1, 0, 0, 1) == 0


def test_adaptive_k_without_a_draft_is_refused_in_one_line(tiny_cache, capsys):
    """generate (bench already requires --draft; its Python entry is checked below)."""
    from draftsmith.cli import main

    assert main(["generate", "--target", "tiny-random", "--quiet", "--adaptive-k", "--max-new-tokens", "4", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--adaptive-k" in err and "--draft" in err, err


def test_run_bench_refuses_an_adaptive_ceiling_without_a_drafter(tiny_target):
    from draftsmith.evaluation.bench import run_bench

    with pytest.raises(DraftsmithError) as e:
        run_bench(tiny_target, None, [], None, 4, SamplingConfig(), adaptive_k=4, baselines=())
    one_line(e, "adaptive_k", "4", "drafter")


def test_the_k_help_says_what_k_means_under_adaptive_k():
    from draftsmith.cli import build_parser

    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["bench"].format_help().split())
    assert "with --adaptive-k the most it drafts" in help_text and "instead of the tree" in help_text


def test_a_checkpoint_path_that_is_not_a_path_is_one_line():
    from draftsmith import Checkpoint

    with pytest.raises(DraftsmithError, match=r"a checkpoint folder's path .*not int 123") as err:
        Checkpoint.open(123)
    assert "\n" not in str(err.value)


def test_export_wants_a_whole_number_of_speculative_tokens(tiny, tmp_path):
    from draftsmith import export

    _, spec, _ = tiny("draft_lm")
    for k in ("3", 2.5, True, 0):
        with pytest.raises(DraftsmithError, match="num_speculative_tokens: a whole number >= 1"):
            export.export(spec, "hf", tmp_path / f"out-{k}", num_speculative_tokens=k)
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.parametrize("old", ["draftsmith.report", "draftsmith.export", "draftsmith.engines"])
def test_removed_module_paths_say_so_in_one_line(old):
    """The paths from before the layered layout are gone (CHANGELOG.md): Python's own one line,
    not a traceback from an import shim."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", old], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and f"No module named {old}" in r.stderr and "Traceback" not in r.stderr


def test_the_engine_refuses_an_object_outside_the_contract_in_one_line(tiny_target):
    class Duck:  # start/propose/accept, but not a Drafter: its other members are unknown
        def start(self, *a, **k): ...
        def propose(self, *a, **k): ...
        def accept(self, *a, **k): ...

    with pytest.raises(DraftsmithError, match=r"subclass of draftsmith.infer.Drafter.*Duck") as err:
        Engine(tiny_target, Duck(), 2)
    assert "\n" not in str(err.value)
