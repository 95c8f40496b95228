"""vLLM as a cross-check engine: the target with or without a draft, batch size 1.

Which vLLM is draftsmith/shipping/installs.py's `resolve_vllm` (--vllm PATH, DRAFTSMITH_VLLM, else
.engines/vllm: the CPU build; .engines/vllm-gpu or the user's own on GPUs). The runner
(vllm_runner.py) runs under that vLLM's python in isolated mode (`-I`: no
PYTHONPATH, and the runner's own folder is not put on sys.path, so nothing of draftsmith shadows
vLLM's modules). The engine core runs in the runner's process (VLLM_ENABLE_V1_MULTIPROCESSING=0):
at batch size 1 a second process only adds a hop, and an idle one must not compete for the 2
cores of the machines we measure on.
"""

from __future__ import annotations

import os
import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.engines import EngineOutput
from draftsmith.shipping.engines.protocol import RunnerProcess
from draftsmith.shipping.installs import resolve_vllm

RUNNER = pathlib.Path(__file__).with_name("vllm_runner.py")
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4")
KV_CACHE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE: ample for batch 1 at a few thousand tokens


class VLLMEngine:
    name = "vllm"

    def __init__(
        self,
        target_dir,
        *,
        draft_dir=None,
        method: str | None = None,
        num_speculative_tokens: int | None = None,
        dtype: str = "float32",
        max_model_len: int = 2048,
        log_path="vllm.log",
        threads: int | None = None,
        speculative_extra: dict | None = None,
        parallel: dict | None = None,
        vllm=None,
    ):
        # speculative_extra: further speculative_config keys (PARD: {"parallel_drafting": true}).
        # parallel: {"tensor_parallel_size": N, "pipeline_parallel_size": M, "gpu_memory_utilization": F,
        # "engine_args": {...}}, vLLM's own arguments. vllm: which vLLM (a --vllm PATH or a resolved
        # VLLMInstall; None: the default).
        self.install = resolve_vllm(vllm)
        spec = None
        if method is not None:
            spec = {
                "method": method,
                "num_speculative_tokens": int(num_speculative_tokens),
                **(speculative_extra or {}),
            }
            if draft_dir is not None:
                spec["model"] = str(draft_dir)
        env = vllm_env(cpu_folder(self.install), threads, VLLM_ENABLE_V1_MULTIPROCESSING="0")
        config = {
            "target": str(target_dir),
            "dtype": dtype,
            "speculative_config": spec,
            "max_model_len": int(max_model_len),
            "seed": 0,
            **{
                k: (float(v) if k == "gpu_memory_utilization" else int(v))
                for k, v in (parallel or {}).items()
                if v and k != "engine_args"
            },
            "engine_args": dict((parallel or {}).get("engine_args") or {}),  # --vllm-arg: vLLM's own, as given
        }
        label = f"vLLM ({method or 'plain'})"
        self.process = RunnerProcess(label, [str(self.install.python), "-I", str(RUNNER)], config, log_path, env)
        self.versions = self.process.ready.get("versions", {})
        self.load_s = self.process.ready.get("load_s")

    def generate(
        self, prompt_ids: list[int], max_tokens: int, stop_token_ids=(), sampling: dict | None = None
    ) -> EngineOutput:
        """Greedy, or sampled where `sampling` names a temperature > 0 (keys temperature, top_p,
        top_k, seed: vLLM's SamplingParams)."""
        r = self.process.request(
            {
                "prompt_ids": list(map(int, prompt_ids)),
                "max_tokens": int(max_tokens),
                "stop_token_ids": sorted(int(t) for t in stop_token_ids),
                **{k: v for k, v in (sampling or {}).items() if k in ("temperature", "top_p", "top_k", "seed")},
            }
        )
        spec = r.get("spec") or {}
        return EngineOutput(
            list(r["output_ids"]),
            float(r["elapsed_s"]),
            int(spec.get("drafts", 0)),
            int(spec.get("draft_tokens", 0)),
            int(spec.get("accepted_tokens", 0)),
            [int(x) for x in spec.get("accepted_per_pos", [])],
        )

    def close(self) -> None:
        self.process.close()


def cpu_folder(install) -> pathlib.Path | None:
    """The environment whose preloads vLLM's CPU guide asks for: a CPU build's (or one not known to
    be a GPU build); None for a GPU build, which preloads nothing."""
    return None if install.cpu is False else install.folder


def vllm_env(folder: pathlib.Path | None, threads: int | None = None, **extra: str) -> dict:
    """The environment every vLLM process of ours runs under: offline, no usage reports, our KV
    space (a CPU build's), OMP threads = this process's cores, the CPU guide's preloads (`folder`:
    the CPU build's environment; None: none); `extra` on top."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads or len(os.sched_getaffinity(0))),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        **extra,
    }
    preload = preloads(folder)
    if preload:
        env["LD_PRELOAD"] = preload
    return env


def preloads(folder: pathlib.Path) -> str:
    """What vLLM's CPU install guide preloads: tcmalloc (Debian's libtcmalloc-minimal4, installed by
    scripts/install_engines.sh) and Intel's OpenMP (the venv's intel-openmp); without them vLLM warns
    of "significant performance loss" for speculative decoding, and a race would be unfair to it."""
    if folder is None:
        return ""
    libs = [p for p in TCMALLOC if pathlib.Path(p).is_file()][:1]
    libs += [str(p) for p in (folder / "lib" / "libiomp5.so",) if p.is_file()]
    return ":".join(libs)


class VLLMServer:
    """vLLM's OpenAI-compatible server on 127.0.0.1 (the resolved vLLM's `VLLMInstall.server()`),
    e.g. to regenerate training data through it (data.regenerate_with=endpoint). A context
    manager; `url` is the base URL the endpoint client takes (…/v1)."""

    def __init__(
        self,
        target_dir,
        *,
        served_name: str = "target",
        dtype: str = "bfloat16",
        port: int = 0,
        max_model_len: int = 2048,
        log_path="vllm-server.log",
        startup_s: float = 900.0,
        vllm=None,
        extra_args=(),
    ):
        # vllm: which vLLM (a --vllm PATH or a resolved VLLMInstall; None: the default);
        # extra_args: further `vllm serve` arguments (a speculative config, parallelism).
        import socket
        import subprocess
        import time
        import urllib.request

        self.install = resolve_vllm(vllm)
        if not port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.url, self.served_name = f"http://127.0.0.1:{port}/v1", served_name
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
            "PYTHONPATH": "",
        }
        preload = preloads(cpu_folder(self.install))
        if preload:
            env["LD_PRELOAD"] = preload
        argv = [
            *self.install.server(),
            "--model",
            str(target_dir),
            "--served-model-name",
            served_name,
            "--dtype",
            dtype,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(max_model_len),
            *extra_args,
        ]
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + startup_s
        while True:
            if self.proc.poll() is not None:
                self.log.close()
                raise DraftsmithError(
                    f"the vLLM server exited while starting (status {self.proc.returncode}); its log: {log_path}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise DraftsmithError(f"the vLLM server did not answer within {startup_s:.0f} s; its log: {log_path}")
            time.sleep(2)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except Exception:  # noqa: BLE001 -- a server that ignores SIGTERM is killed
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def add_vllm_argument(parser) -> None:
    """--vllm, for every command that starts vLLM (draftsmith/shipping/installs.py: resolve_vllm)."""
    parser.add_argument(
        "--vllm",
        default=None,
        metavar="PATH",
        help="the vLLM to run: a venv, its python or its `vllm` executable (default: $DRAFTSMITH_VLLM, "
        "else .engines/vllm; GPUs: `bash scripts/install_engines.sh vllm-gpu`, then --vllm .engines/vllm-gpu)",
    )


def add_parallel_arguments(parser) -> None:
    """vLLM's own parallelism, for every command that starts vLLM (a target too large for one GPU)."""
    parser.add_argument(
        "--tensor-parallel-size", type=_at_least_one, default=None, help="vLLM: GPUs the target is split over"
    )
    parser.add_argument(
        "--pipeline-parallel-size", type=_at_least_one, default=None, help="vLLM: pipeline stages (e.g. nodes)"
    )


def parallel_args(args) -> list[str]:
    """The `vllm serve` flags for the parallelism `args` names."""
    out = []
    for flag, name in (
        ("--tensor-parallel-size", "tensor_parallel_size"),
        ("--pipeline-parallel-size", "pipeline_parallel_size"),
    ):
        if getattr(args, name, None):
            out += [flag, str(getattr(args, name))]
    return out


def _at_least_one(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def crosscheck_engines(setup, export, max_model_len: int, tokenizer=None):
    """`draftsmith crosscheck`'s two vLLM engines for a checkpoint: the target alone, and the target
    with the `--format vllm` export as its speculative draft (the layout's method and extras)."""
    from draftsmith.shipping.export.common import layout

    draft_dir, lay = export(), layout(setup.kind, "vllm")
    common = dict(
        dtype=setup.dtype,
        max_model_len=max_model_len,
        parallel=getattr(setup, "parallel", None),
        vllm=getattr(setup, "vllm", None),
    )
    plain = VLLMEngine(setup.target_dir, log_path=setup.workdir / "vllm-plain.log", **common)
    spec = VLLMEngine(
        setup.target_dir,
        draft_dir=draft_dir,
        method=lay.method,
        num_speculative_tokens=setup.k,
        speculative_extra=lay.spec_extra or None,
        log_path=setup.workdir / "vllm-draft.log",
        **common,
    )
    info = {
        "versions": spec.versions,
        "export": str(draft_dir),
        "method": lay.method,
        "load_s": {"plain": plain.load_s, "draft": spec.load_s},
    }
    if getattr(spec, "install", None) is not None:  # which vLLM: its python, version, how it was chosen
        info["install"] = spec.install.stamp()
    return plain, spec, info


def main(argv=None) -> int:
    """`python -m draftsmith.shipping.engines.vllm_engine TARGET [--dtype D] [-- COMMAND ...]`: serve the
    target with vLLM (--vllm PATH, DRAFTSMITH_VLLM, else .engines/vllm); with a COMMAND, run it while the server is up
    ({url} and {model} in it are replaced by the server's base URL and served name), then stop
    the server. E.g. regenerate training data through it:

        python -m draftsmith.shipping.engines.vllm_engine smollm2-135m-instruct -- \\
            draftsmith train RECIPE --data-only \\
            --data.regenerate=true --data.regenerate_with=endpoint --data.regenerate_endpoint={url} \\
            --data.regenerate_model={model} --data.regenerate_concurrency=16
    """
    import argparse
    import subprocess
    import sys

    from draftsmith.errors import run_command

    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(
        prog="python -m draftsmith.shipping.engines.vllm_engine", description=main.__doc__.splitlines()[0]
    )
    ap.add_argument("target", help="built-in name or model folder")
    ap.add_argument(
        "--dtype", default="bfloat16", help="bfloat16 (default: fast on CPUs with AMX/AVX512-BF16) or float32"
    )
    ap.add_argument("--served-name", default=None, help="the model name clients ask for (default: the target's name)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--log", default="vllm-server.log")
    add_vllm_argument(ap)
    add_parallel_arguments(ap)
    args = ap.parse_args(argv)

    def run(args) -> int:
        from draftsmith.models.sources import resolve_model

        name = args.served_name or pathlib.Path(args.target).name
        with VLLMServer(
            resolve_model(args.target).path,
            served_name=name,
            dtype=args.dtype,
            port=args.port,
            max_model_len=args.max_model_len,
            log_path=args.log,
            vllm=args.vllm,
            extra_args=parallel_args(args),
        ) as server:
            print(f"vLLM serves {name} at {server.url} (log: {args.log})", file=sys.stderr, flush=True)
            if not command:
                return server.proc.wait()
            filled = [c.replace("{url}", server.url).replace("{model}", name) for c in command]
            return subprocess.run(filled).returncode

    return run_command(run, args)


if __name__ == "__main__":
    import sys

    sys.exit(main())
