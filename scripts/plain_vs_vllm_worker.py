"""vLLM's plain decoding, timed and profiled for scripts/bench_plain_vs_vllm.py: runs inside vLLM's
own environment (.engines/vllm, `python -I`), never imports draftsmith: it loads crosscheck's
runner (draftsmith/shipping/engines/vllm_runner.py) by its path, and starts vLLM and speaks the
protocol as that runner does.

Protocol (JSON lines, as draftsmith/shipping/engines/protocol.py speaks it):
  stdin  line 1  {"target": DIR, "dtype": "float32", "max_model_len": N, "seed": 0}
  stdout         {"ready": true, "load_s": s, "versions": {...}, "processes": [...], ...}
  stdin          {"op": "generate", "prompt_ids": [...], "max_tokens": N}
  stdout         {"elapsed_s": s, "new_tokens": n, "prefill_s": s | null, "decode_s_per_token": s | null}
  stdin          {"op": "profile", "prompt_ids": [...], "steps": S}
  stdout         {"steps": S, "wall_s": s, "ops": [{"op", "scope", "self_us", "count"}, ...]}
  stdin          {"quit": true}  (or end of input)

One request at a time, greedy, `ignore_eos` so every request decodes exactly `max_tokens`
tokens. The process layout, thread binding and KV-cache space come from the environment the host
starts this with (VLLM_ENABLE_V1_MULTIPROCESSING, VLLM_CPU_OMP_THREADS_BIND,
VLLM_CPU_KVCACHE_SPACE, OMP_NUM_THREADS, LD_PRELOAD): the host's variants differ only there.
`prefill_s` and `decode_s_per_token` are vLLM's own per-request timestamps (engine-core clock:
first token minus scheduled, then (last - first) / (n - 1)); the host also times whole requests.
"""

import os
import runpy
import sys
import time

ENGINES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "draftsmith", "shipping", "engines")
RUNNER = runpy.run_path(os.path.join(ENGINES, "vllm_runner.py"))  # its globals: start, serve, ...

SCOPES = ("lm_head", "sampler")  # record_function ranges put around vLLM's calls when profiling
# Every setting a variant of the host (bench_plain_vs_vllm.py) may set: the host clears them from
# the inherited environment first, so a variant runs under its own settings and vLLM's defaults
# for the rest; the worker reports them back, so the JSON shows what vLLM really ran under.
SETTINGS = (
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_CPU_NUM_OF_RESERVED_CPU",
    "VLLM_CPU_KVCACHE_SPACE",
    "OMP_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "LD_PRELOAD",
)


def _processes():
    """This process and its children (vLLM's engine core and workers where it runs them apart):
    each one's CPU affinity and thread count, the evidence for where vLLM's threads ran."""
    import psutil

    me = psutil.Process()
    out = []
    for p in [me, *me.children(recursive=True)]:
        try:
            out.append(
                {
                    "pid": p.pid,
                    "name": " ".join(p.cmdline()[:3])[-80:] or p.name(),
                    "cpu_affinity": p.cpu_affinity(),
                    "threads": p.num_threads(),
                }
            )
        except psutil.Error:
            continue
    return out


def _params(max_tokens):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)


def generate(llm, req):
    from vllm.inputs import TokensPrompt

    t = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=req["prompt_ids"])], _params(req["max_tokens"]), use_tqdm=False)
    elapsed = time.perf_counter() - t
    n = len(out[0].outputs[0].token_ids)
    m = getattr(out[0], "metrics", None)
    prefill = decode = None
    if m is not None and getattr(m, "first_token_ts", 0) and getattr(m, "scheduled_ts", 0):
        prefill = m.first_token_ts - m.scheduled_ts
        if n > 1 and m.last_token_ts:
            decode = (m.last_token_ts - m.first_token_ts) / (n - 1)
    return {"elapsed_s": elapsed, "new_tokens": n, "prefill_s": prefill, "decode_s_per_token": decode}


def _label(obj, name, scope):
    """Wrap obj.name in a record_function(scope): the profile attributes its operators to it."""
    import torch

    inner = getattr(obj, name)

    def labelled(*a, **k):
        with torch.profiler.record_function(scope):
            return inner(*a, **k)

    setattr(obj, name, labelled)


def profile(llm, req):
    """Operators of `steps` decode steps (after the prefill and one untimed step), by self CPU
    time and innermost SCOPES range; only where the model runs in this process."""
    import torch
    from vllm.inputs import TokensPrompt

    engine = llm.llm_engine
    worker = getattr(getattr(engine, "model_executor", None), "driver_worker", None)
    runner = getattr(getattr(worker, "worker", worker), "model_runner", None)
    if runner is None:
        return {"error": "the model runs in another process (VLLM_ENABLE_V1_MULTIPROCESSING=1): profile in-process"}
    if not getattr(runner, "_bench_labelled", False):
        _label(runner.model, "compute_logits", "lm_head")
        if hasattr(runner, "sampler"):
            _label(runner.sampler, "forward", "sampler")
        runner._bench_labelled = True
    steps = int(req["steps"])
    engine.add_request("profile", TokensPrompt(prompt_token_ids=req["prompt_ids"]), _params(steps + 4))
    engine.step()  # prefill
    engine.step()  # one decode step untimed
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            engine.step()
        wall = time.perf_counter() - t
    while engine.has_unfinished_requests():
        engine.step()
    return {"steps": steps, "wall_s": wall, "ops": scoped_ops(prof.events())}


def scoped_ops(events, scopes=SCOPES):
    """[{op, scope, self_us, count}], the most expensive first: each operator's self CPU time
    summed per innermost `scopes` range above it (None outside them); the ranges themselves are
    left out (their self time is Python between operators)."""
    rows = {}
    for e in events:
        if e.name in scopes or e.self_cpu_time_total <= 0:
            continue
        scope, p = None, e.cpu_parent
        while p is not None:
            if p.name in scopes:
                scope = p.name
                break
            p = p.cpu_parent
        row = rows.setdefault((e.name, scope), {"op": e.name, "scope": scope, "self_us": 0.0, "count": 0})
        row["self_us"] += e.self_cpu_time_total
        row["count"] += 1
    return sorted(rows.values(), key=lambda r: -r["self_us"])


def start(config):
    """vLLM loaded as crosscheck's runner loads it: (the LLM, the ready message, with the threads,
    processes and settings it runs under)."""
    import torch

    llm, ready = RUNNER["start"](config)
    ready.update(
        torch_threads=torch.get_num_threads(),
        compilation_mode=str(llm.llm_engine.vllm_config.compilation_config.mode),
        processes=_processes(),
        env={k: os.environ.get(k) for k in SETTINGS},
    )
    return llm, ready


def answer(llm, req):
    """A generate or profile request, with the processes' placement after it."""
    out = {"generate": generate, "profile": profile}[req.get("op", "generate")](llm, req)
    out["processes"] = _processes()
    return out


if __name__ == "__main__":  # vLLM may start processes that re-import __main__
    sys.exit(RUNNER["serve"](start, answer))
