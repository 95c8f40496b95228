"""Extracts the target's hidden states with vLLM, inside vLLM's own environment (.engines/vllm):
never imports draftsmith (the host side is vllm_extract.py; train/features/vllm.py reads the files).

vLLM's own path, the one speculators and ModelOpt use: `speculative_config={"method":
"extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config":
{"eagle_aux_hidden_state_layer_ids": [...]}}}` with the `ExampleHiddenStatesConnector` KV connector
(vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py), which writes
one safetensors file per request: `hidden_states` [T, len(ids), H] and `token_ids` [T]. Aux id k
is the residual stream entering decoder layer k (0: the embeddings; L: the last layer's output,
before the final norm). Generating one token per prompt makes vLLM run the prompt's prefill.

On a CPU-only build the stock connector fails at its first write ("RuntimeError: pin_memory=True
requires a CUDA or other accelerator backend"): there the runner loads vllm_plugins/'s subclass,
which writes the same file synchronously, and runs eager (prefill only: nothing to compile for).

Protocol (JSON lines, as vllm_runner.py):
  stdin  line 1  {"target": DIR, "target_name": NAME, "dtype": "float32", "aux_layers": [ids],
                  "storage": DIR, "max_model_len": N, "engine_args": {...}}  (engine_args: any
                  further LLM(...) arguments: tensor_parallel_size, pipeline_parallel_size, ...)
  stdout         {"ready": true, "load_s": s, "versions": {...}}  (or {"error": "..."})
  stdin          {"rows": [[token ids], ...]}
  stdout         {"files": [path per row], "elapsed_s": s}  (complete files: the runner waited
                  on each file's write lock)
  stdin          {"quit": true}  (or end of input)

Beside vLLM's files the runner writes `vllm-hidden-states.json` (the target, the aux ids, the
versions): what the reader checks a folder against.
"""

import json
import os
import runpy
import sys
import time

META = "vllm-hidden-states.json"
HERE = os.path.dirname(os.path.abspath(__file__))
# `python -I` puts neither draftsmith nor this folder on sys.path: the protocol loop comes by its path.
serve = runpy.run_path(os.path.join(HERE, "runner_protocol.py"))["serve"]


def start(config: dict):
    """Load vLLM with the hidden-states connector writing into config["storage"] (its META says
    what the folder holds): (the LLM with the connector's file helpers, the ready message)."""
    t = time.perf_counter()
    import torch
    import vllm
    from vllm import LLM
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
        cleanup_hidden_states,
        load_hidden_states,
    )

    storage = os.path.abspath(config["storage"])
    os.makedirs(storage, exist_ok=True)
    aux = [int(i) for i in config["aux_layers"]]
    engine_args = dict(config.get("engine_args", {}))
    connector = {"kv_connector": "ExampleHiddenStatesConnector"}
    if not torch.cuda.is_available():
        # vLLM's connector copies through pinned memory on a CUDA stream, which a CPU build
        # refuses; ours (vllm_plugins/) writes the same file synchronously. Workers import it by
        # module path: the folder goes on sys.path, which vLLM's worker processes inherit.
        sys.path.insert(0, os.path.join(HERE, "vllm_plugins"))
        connector = {
            "kv_connector": "DraftsmithHiddenStatesConnector",
            "kv_connector_module_path": "draftsmith_hidden_states_connector",
        }
        # Extraction is prefill only: compiling the graph for it cost minutes on 2 cores for nothing.
        engine_args.setdefault("enforce_eager", True)
    llm = LLM(
        model=config["target"],
        dtype=config.get("dtype", "float32"),
        seed=0,
        max_model_len=config.get("max_model_len", 2048),
        enable_prefix_caching=False,  # a cached prefix is not recomputed: its hidden states would be missing
        speculative_config={
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": aux}},
        },
        kv_transfer_config={
            **connector,
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": storage},
        },
        **engine_args,
    )
    versions = {"vllm": vllm.__version__, "torch": torch.__version__}
    meta = {
        "target": config.get("target_name") or config["target"],
        "target_path": config["target"],
        "aux_layers": aux,
        "dtype": config.get("dtype", "float32"),
        "versions": versions,
        "connector": connector["kv_connector"],
    }
    with open(os.path.join(storage, META), "w") as f:
        json.dump(meta, f, indent=2)
    ready = {"ready": True, "load_s": time.perf_counter() - t, "versions": versions}
    return (llm, load_hidden_states, cleanup_hidden_states), ready


def answer(state, req: dict) -> dict:
    """The hidden states of req["rows"]: one complete file per row."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm, load_hidden_states, cleanup_hidden_states = state
    t = time.perf_counter()
    params = SamplingParams(temperature=0.0, max_tokens=1, detokenize=False)
    prompts = [TokensPrompt(prompt_token_ids=list(r)) for r in req["rows"]]
    results = llm.generate(prompts, params, use_tqdm=False)
    files = []
    for r in results:
        path = (r.kv_transfer_params or {}).get("hidden_states_path")
        if not path:
            raise RuntimeError(f"request {r.request_id}: vLLM returned no hidden_states_path")
        load_hidden_states(path)  # blocks on the file's lock until the write finished
        cleanup_hidden_states(path, keep_hidden_states=True)  # the lock file only
        files.append(path)
    return {"files": files, "elapsed_s": time.perf_counter() - t}


if __name__ == "__main__":  # vLLM may start its engine core in a child process that re-imports __main__
    sys.exit(serve(start, answer))
