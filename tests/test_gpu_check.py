"""scripts/gpu_check.sh, the one prepared GPU run, checked here on the CPU: it parses, and its
engine bench runs where the optional packages the GPU image lacks cannot be imported."""

import json
import math
import os
import pathlib
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Not on the GPU machine: every import of these must stay lazy on the paths gpu_check.sh runs.
ABSENT = ("datasets", "gguf", "deepspeed", "wandb", "peft", "chitchat_dataset")


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_check.sh")], check=True)


def test_bench_engine_without_optional_packages(tmp_path):
    out, k, n = tmp_path / "engine.json", 4, 24
    argv = [
        "bench_engine.py",
        "--shapes",
        "tiny",
        "--device",
        "cpu",
        "-k",
        str(k),
        "--max-new-tokens",
        str(n),
        "--prompt-len",
        "8",
        "--repeats",
        "1",
        "--out",
        str(out),
    ]
    code = (
        f"import sys, runpy\nfor m in {ABSENT!r}: sys.modules[m] = None\n"
        f"sys.argv = {argv!r}\nrunpy.run_path({str(ROOT / 'scripts' / 'bench_engine.py')!r}, run_name='__main__')\n"
        f"assert not [m for m in {ABSENT!r} if sys.modules.get(m) is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=300)
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"plain", f"oracle chain{k}", f"self chain{k}", "oracle tree30"}  # CPU: eager only
    assert all(r["same_as_plain"] and r["new_tokens"] == n and r["mode"] == "eager" for r in rows.values())
    assert rows["plain"]["mean_acceptance_length"] == 1.0 and rows["plain"]["target_forwards"] == n - 1
    for method in (f"oracle chain{k}", f"self chain{k}", "oracle tree30"):
        # every draft accepted: k+1 tokens per target forward (the first token comes from prefill)
        assert rows[method]["mean_acceptance_length"] == k + 1, method
        assert rows[method]["target_forwards"] == math.ceil((n - 1) / (k + 1)), method


def _dry_run(tmp_path, **env) -> pathlib.Path:
    """gpu_check.sh on the CPU: the tiny shape and recipe, no caps (a loaded machine is slow, not
    hung: the outer timeout only guards against a hang)."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "SHAPE": "tiny",
        "RECIPE": "configs/tiny/eagle3.yaml",
        "TRAIN_STEPS": "4",
        "MATMUL_N": "256",
        "BUDGET": "0",
        "CAP_SCALE": "0",
        "SKIP_INSTALL": "1",
        "OUT": str(out),
        "RUN": str(tmp_path / "run"),
        **env,
    }
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], check=True, env=env, cwd=ROOT, timeout=3600)
    return out


def test_gpu_check_dry_run_returns_two_files_with_every_step(tmp_path):
    """Every step runs on the CPU (the GPU tests skip), and OUT holds exactly the summary and the
    packed run folder with each step's JSON."""
    out = _dry_run(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["results.tgz", "summary.txt"]
    with tarfile.open(out / "results.tgz") as tar:
        names = {pathlib.PurePath(n).name for n in tar.getnames()}
        engine = json.load(tar.extractfile("./engine.json"))
        check = json.load(tar.extractfile("./plan_check.json"))
    assert {"verify_cost.json", "engine.json", "plan_check.json", "matmul.json", "summary.txt", "steps.txt"} <= names
    rows = {r["method"]: r for r in engine["rows"]}
    assert set(rows) == {"plain", "oracle chain5", "oracle tree62"}  # --methods oracle,tree, K+1 = 6
    assert all(r["same_as_plain"] and r["graphs_after_warmup"]["graphs"] == 0 for r in rows.values())
    assert all(r["settled"] for r in rows.values())  # the oracle replays a fixed point of the engine
    assert check["random_target"] is True and check["memory"]["measured_bytes"] > 0
    summary = (out / "summary.txt").read_text()
    for step in ("tests", "verify", "engine", "train", "matmul"):
        assert f"{step}: rc 0" in summary, step
    assert "| eager | oracle chain5 |" in summary and "(d) training configs/tiny/eagle3.yaml (random target" in summary
    assert "no result" not in summary


def test_gpu_check_stops_at_its_budget_and_still_returns_both_files(tmp_path):
    """A budget spent before a step starts: the step is skipped and said so, and the two files
    come back all the same."""
    out = _dry_run(tmp_path, BUDGET="1", STEPS="verify engine")
    assert sorted(p.name for p in out.iterdir()) == ["results.tgz", "summary.txt"]
    summary = (out / "summary.txt").read_text()
    assert "verify: not run" in summary and "engine: not run" in summary and "engine: no result" in summary


def test_random_model_builds_where_it_runs(monkeypatch):
    """The 8B shape is built directly on its device in its dtype (never through host memory):
    random_model builds under `torch.device(device)`, here the meta device."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from bench_verify_cost import random_model

    model = random_model("llama-3.1-8b", torch.device("meta"), torch.bfloat16)
    params = list(model.parameters())
    assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in params)
    assert 7.9e9 < sum(p.numel() for p in params) < 8.1e9


def test_train_step_overrides_take_the_default_recipe_off_regenerated_data():
    """The train step feeds the 8B recipe the stdlib text; that recipe trains on regenerated chats,
    so the step must also set the data source back to the corpus (on an H200 the step stopped at
    'data.regenerate needs chat data' while the CPU dry run, on the tiny recipe, passed)."""
    import re

    from draftsmith.train.config import load_recipe

    text = (ROOT / "scripts" / "gpu_check.sh").read_text()
    recipe = re.search(r"RECIPE=\$\{RECIPE:-(\S+)\}", text).group(1)
    step = text[text.index("step train") :].split("--json")[0]
    overrides = [o for o in re.findall(r"(--(?:data|optim)\.[a-z_]+=[^\s$)]+)", step) if "mixed_precision" not in o]
    r = load_recipe(str(ROOT / recipe), overrides)
    assert r.data.path == "stdlib"
    assert not r.data.regenerate and r.data.source == "corpus", overrides
