"""vLLM as the target-feature extractor: the host side.

The runner (vllm_features.py) runs under the python of the vLLM draftsmith/shipping/installs.py's
`resolve_vllm` names (--vllm PATH, DRAFTSMITH_VLLM, else .engines/vllm) in isolated mode, loads the
target with vLLM's own hidden-state extraction and answers, per batch of token-id rows, the files
vLLM's hidden-states connector wrote. train/features/vllm.py reads those files into our offline
feature cache; this class only starts and speaks to the engine (train/ never imports engines/).
Tensor/pipeline parallelism and multiple nodes are vLLM's own engine arguments, passed through.
"""

from __future__ import annotations

import pathlib

from draftsmith.shipping.engines.protocol import RunnerProcess
from draftsmith.shipping.engines.vllm_engine import cpu_folder, vllm_env
from draftsmith.shipping.installs import resolve_vllm

RUNNER = pathlib.Path(__file__).with_name("vllm_features.py")


class VLLMFeatureExtractor:
    """`extractor(rows)` -> one connector file per row (token ids), in order. A context manager."""

    def __init__(
        self,
        target_dir,
        *,
        aux_layers: list[int],
        storage,
        target_name: str,
        dtype: str = "float32",
        max_model_len: int = 2048,
        engine_args: dict | None = None,
        log_path="vllm-features.log",
        threads: int | None = None,
        vllm=None,
    ):
        install = resolve_vllm(vllm)  # vllm: a --vllm PATH or a resolved VLLMInstall (None: the default)
        # The engine core in its own process (vLLM's default): the connector writes a request's
        # file in the core's NEXT step, which an in-process engine never takes once generate()
        # has returned (the runner would wait on the file's lock forever).
        env = vllm_env(cpu_folder(install), threads, VLLM_ENABLE_V1_MULTIPROCESSING="1")
        config = {
            "target": str(target_dir),
            "target_name": target_name,
            "dtype": dtype,
            "aux_layers": [int(i) for i in aux_layers],
            "storage": str(storage),
            "max_model_len": int(max_model_len),
            "engine_args": dict(engine_args or {}),
        }
        self.process = RunnerProcess(
            "vLLM (extract_hidden_states)", [str(install.python), "-I", str(RUNNER)], config, log_path, env
        )
        # the feature cache's manifest records these (extracted_by): which vLLM, not only its version
        self.versions = {**self.process.ready.get("versions", {}), "vllm_python": str(install.python)}

    def __call__(self, rows: list[list[int]]) -> list[str]:
        answer = self.process.request({"rows": [list(map(int, r)) for r in rows]})
        return list(answer["files"])

    def close(self) -> None:
        self.process.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
