"""A target too large for one GPU: every command that starts vLLM takes vLLM's own
--tensor-parallel-size / --pipeline-parallel-size and hands them to vLLM; the 70B recipe and the
page use them."""

import pathlib
import types

import pytest

from draftsmith.cli import build_parser
from draftsmith.shipping.engines import vllm_engine
from draftsmith.shipping.engines.vllm_runner import llm_kwargs
from draftsmith.train.features.cli import build_parser as features_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_runner_passes_the_parallelism_to_vllm():
    kwargs = llm_kwargs({"target": "t", "tensor_parallel_size": 8, "pipeline_parallel_size": 2})
    assert kwargs["tensor_parallel_size"] == 8 and kwargs["pipeline_parallel_size"] == 2
    assert "tensor_parallel_size" not in llm_kwargs({"target": "t"})  # vLLM's default: one GPU


def test_crosscheck_takes_the_parallelism_to_both_vllm_engines(monkeypatch, tmp_path):
    args = build_parser().parse_args(
        ["crosscheck", "ckpt", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    )
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (8, 2)
    made = []

    class Engine:
        def __init__(self, target_dir, **kw):
            made.append(kw)
            self.versions, self.load_s = {}, 0.0

    monkeypatch.setattr(vllm_engine, "VLLMEngine", Engine)
    monkeypatch.setattr(
        "draftsmith.shipping.export.common.layout",
        lambda kind, fmt: types.SimpleNamespace(method="eagle3", spec_extra={}),
    )
    setup = types.SimpleNamespace(
        dtype="bfloat16", target_dir=tmp_path, workdir=tmp_path, k=3, kind="eagle3",
        parallel={"tensor_parallel_size": 8, "pipeline_parallel_size": 2},
    )  # fmt: skip
    vllm_engine.crosscheck_engines(setup, lambda: tmp_path / "export", 512)
    assert [m["parallel"] for m in made] == [setup.parallel] * 2


def test_crosscheck_refuses_parallelism_without_vllm():
    from draftsmith.errors import DraftsmithError
    from draftsmith.shipping.crosscheck_cli import run

    args = build_parser().parse_args(["crosscheck", "ckpt", "--engines", "llama.cpp", "--tensor-parallel-size", "2"])
    with pytest.raises(DraftsmithError, match="add vllm to --engines"):
        run(args)


def test_the_vllm_server_and_features_take_the_parallelism():
    import argparse

    ap = argparse.ArgumentParser()
    vllm_engine.add_parallel_arguments(ap)
    args = ap.parse_args(["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"])
    assert vllm_engine.parallel_args(args) == ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    with pytest.raises(SystemExit):
        ap.parse_args(["--tensor-parallel-size", "0"])
    f = features_parser().parse_args(["r.yaml", "--output", "o", "--engine", "vllm", "--tensor-parallel-size", "8"])
    assert f.tensor_parallel_size == 8


def test_the_70b_recipe_and_page_split_the_target():
    recipe = (ROOT / "configs/llama-3.3-70b-instruct/eagle3.yaml").read_text()
    page = (ROOT / "docs/your-target.md").read_text()
    for text in (recipe, page):
        lines = [line for line in text.splitlines() if "llama-3.3-70b" in line.lower() and "--engine vllm" in line]
        assert lines and all("--tensor-parallel-size 8" in line for line in lines)
        assert "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8" in text


def test_crosscheck_shares_the_gpu_between_its_engines():
    """On a GPU, crosscheck's two vLLM engines start beside our copy of the target: each gets half
    of what is free (less a margin), passed to vLLM as gpu_memory_utilization; a GPU with too little
    left is one line."""
    import pytest

    from draftsmith.errors import DraftsmithError
    from draftsmith.shipping.crosscheck import engine_share

    total = 80 * 10**9
    share = engine_share(64 * 10**9, total)  # 16 GB of our bf16 8B target already on the GPU
    assert share == pytest.approx((0.8 - 0.05) / 2, abs=1e-3)
    assert 2 * share * total + 16 * 10**9 < total  # both engines and ours fit
    with pytest.raises(DraftsmithError, match="too little for vLLM's two engines"):
        engine_share(8 * 10**9, total)
    assert llm_kwargs({"target": "t", "gpu_memory_utilization": share})["gpu_memory_utilization"] == share
    assert "gpu_memory_utilization" not in llm_kwargs({"target": "t"})  # vLLM's default off a GPU
