"""Runs vLLM for draftsmith, inside vLLM's own environment (.engines/vllm): never imports draftsmith.

Protocol (JSON lines; see draftsmith/shipping/engines/protocol.py for the host side):
  stdin  line 1  {"target": DIR, "dtype": "float32", "speculative_config": {...} | null,
                  "max_model_len": N, "seed": 0, and vLLM's own: "tensor_parallel_size",
                  "pipeline_parallel_size", "gpu_memory_utilization", "engine_args": {...}}
  stdout         {"ready": true, "load_s": s, "versions": {...}}  (or {"error": "..."})
  stdin          {"prompt_ids": [...], "max_tokens": N, "stop_token_ids": [...],
                  "temperature": T, "top_p": P, "top_k": K, "seed": S}  (sampling keys optional)
  stdout         {"output_ids": [...], "elapsed_s": s, "spec": {"drafts", "draft_tokens",
                  "accepted_tokens", "accepted_per_pos"} | null}
  stdin          {"quit": true}  (or end of input)

One request at a time (batch size 1). Greedy decoding unless a request names a temperature > 0
(then vLLM samples, seeded per request by `seed`). The speculative counters are vLLM's own
(`LLM.get_metrics()`: vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens,
_num_accepted_tokens_per_pos), differenced around each request. vLLM's own logging goes to
stderr: stdout carries only the protocol.
"""

import os
import runpy
import sys
import time

# `python -I` puts neither draftsmith nor this folder on sys.path: the protocol loop comes by its path.
serve = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner_protocol.py"))["serve"]


def _spec_counters(llm):
    from vllm.v1.metrics.reader import Counter, Vector

    names = {
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
    }
    found = {}
    for m in llm.get_metrics():
        key = names.get(m.name)
        if key is None:
            continue
        if isinstance(m, Vector):
            prev = found.get(key) or []
            values = list(m.values)
            found[key] = [a + b for a, b in zip(values, prev + [0] * (len(values) - len(prev)))]
        elif isinstance(m, Counter):
            found[key] = found.get(key, 0) + m.value
    return found or None


def _delta(after, before):
    if after is None:
        return None
    before = before or {}
    out = {}
    for key, value in after.items():
        if isinstance(value, list):
            prev = before.get(key) or [0] * len(value)
            out[key] = [a - b for a, b in zip(value, prev + [0] * (len(value) - len(prev)))]
        else:
            out[key] = value - before.get(key, 0)
    return out


PARALLEL = ("tensor_parallel_size", "pipeline_parallel_size")  # vLLM's own engine arguments, passed through


def llm_kwargs(config: dict) -> dict:
    """vLLM's LLM(...) arguments for a runner config: batch 1, no prefix cache, the target split
    over tensor_parallel_size GPUs x pipeline_parallel_size stages when the config says so."""
    kwargs = dict(
        model=config["target"],
        dtype=config.get("dtype", "float32"),
        seed=config.get("seed", 0),
        max_model_len=config.get("max_model_len", 2048),
        enable_prefix_caching=False,  # every request prefills its prompt anew, as our runtime does
        disable_log_stats=False,  # the metrics: speculative counters, per-request timestamps
        max_num_seqs=1,
    )
    if config.get("speculative_config"):
        kwargs["speculative_config"] = config["speculative_config"]
    kwargs.update({k: int(config[k]) for k in PARALLEL if config.get(k)})
    if config.get("gpu_memory_utilization"):  # its share of the GPU beside the other engines and ours
        kwargs["gpu_memory_utilization"] = float(config["gpu_memory_utilization"])
    kwargs.update(config.get("engine_args") or {})  # the user's own engine arguments (--vllm-arg), last
    return kwargs


def start(config: dict):
    """Load vLLM: (the LLM, the ready message)."""
    t = time.perf_counter()
    import torch
    import vllm
    from vllm import LLM

    llm = LLM(**llm_kwargs(config))
    return llm, {
        "ready": True,
        "load_s": time.perf_counter() - t,
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__},
    }


def answer(llm, req: dict) -> dict:
    """One request, decoded alone: its tokens, time and speculative counters."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sampled = float(req.get("temperature") or 0.0) > 0
    params = SamplingParams(
        temperature=float(req.get("temperature") or 0.0),
        top_p=float(req.get("top_p") or 1.0),
        top_k=int(req.get("top_k") or 0) if sampled else 0,
        seed=int(req.get("seed", 0)) if sampled else None,
        max_tokens=req["max_tokens"],
        stop_token_ids=req.get("stop_token_ids") or None,
        detokenize=False,
    )
    before = _spec_counters(llm)
    t = time.perf_counter()
    result = llm.generate([TokensPrompt(prompt_token_ids=req["prompt_ids"])], params, use_tqdm=False)
    elapsed = time.perf_counter() - t
    ids = list(result[0].outputs[0].token_ids)
    return {"output_ids": ids, "elapsed_s": elapsed, "spec": _delta(_spec_counters(llm), before)}


if __name__ == "__main__":  # vLLM may start its engine core in a child process that re-imports __main__
    sys.exit(serve(start, answer))
