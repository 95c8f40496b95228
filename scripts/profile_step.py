#!/usr/bin/env python
"""Where a plain decode step of our runtime spends its time: the race against vLLM-CPU and
llama.cpp (README "Real engines") says how fast each one is, this says why ours is slower.

Decodes one prompt plainly with infer/Engine and splits the wall time of each step into
(a) the target's forward as transformers runs it, (b) the engine around it (sampling, the
cache's bookkeeping, the stop rule), then profiles the forwards with torch.profiler and lists
the operators by self CPU time: how much is matrix multiplication (the floor any runtime pays)
and how much is everything else (norms, rotary, attention over the static cache, copies, Python).

    python scripts/profile_step.py --target smollm2-135m-instruct --dtype float32 --context 256 --steps 48 \
        --json out.json
"""

from __future__ import annotations

import statistics
import time

import torch

from draftsmith.evaluation.bench import cpu_info, format_cpu
from draftsmith.evaluation.benchkit import add_flags, operator_times, parser, run_main, save
from draftsmith.infer.engine import Engine
from draftsmith.models import Target

MATMUL = ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul", "mkldnn", "onednn")


def print_report(result: dict) -> None:
    """One step's split (forward, engine), then the operators by self CPU time."""
    print(
        f"{result['target']} {result['dtype']}, context {result['context']}, {result['steps']} steps on "
        f"{format_cpu(result['cpu'])}"
    )
    print(
        f"one step {result['ms_per_step']:.1f} ms = forward {result['ms_forward']:.1f} ms + engine "
        f"{result['ms_engine']:.1f} ms; "
        f"matrix multiplications {100 * result['matmul_share_of_op_time']:.0f}% of operator time"
    )
    print(f"{'operator':<40}{'ms/step':>9}{'calls/step':>12}{'share':>8}")
    for op in result["ops"]:
        print(
            f"{op['op'][:39]:<40}{op['self_ms_per_step']:>9.2f}{op['calls_per_step']:>12.1f}{100 * op['share']:>7.1f}%"
        )


def main() -> int:
    ap = parser(
        __doc__, target="smollm2-135m-instruct", dtype={"default": "float32", "choices": ["float32", "bfloat16"]}
    )
    ap.add_argument("--context", type=int, default=256, help="prompt tokens before decoding")
    add_flags(ap, steps={"default": 48, "help": "tokens decoded (timed after a warm-up run)"}, json=None)
    args = ap.parse_args()

    target = Target.load(args.target, dtype=args.dtype, device="cpu")
    # token ids; the content does not change the cost (wrapped for a vocabulary under 1000 + context)
    prompt = [(1000 + i) % target.vocab_size for i in range(args.context)]
    engine = Engine(target)
    forward, spent = target.forward_hidden, []

    def timed_forward(*a, **k):
        t = time.perf_counter()
        out = forward(*a, **k)
        spent.append(time.perf_counter() - t)
        return out

    target.forward_hidden = timed_forward
    engine.generate(prompt, args.steps, eos_token_ids=set())  # warm-up
    spent.clear()
    t = time.perf_counter()
    r = engine.generate(prompt, args.steps, eos_token_ids=set())
    wall = time.perf_counter() - t
    prefill, steps = spent[0], spent[1:]
    step_wall = (wall - prefill) / max(1, len(steps))
    step_forward = statistics.mean(steps)

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        engine.generate(prompt, args.steps, eos_token_ids=set())
    events, total = operator_times(prof)
    top = events[:15]
    matmul = sum(e.self_cpu_time_total for e in events if any(m in e.key for m in MATMUL))
    result = {
        "target": args.target,
        "dtype": args.dtype,
        "context": args.context,
        "steps": len(steps),
        "cpu": cpu_info(),
        "torch": torch.__version__,
        "tokens": len(r.tokens),
        "ms_per_step": step_wall * 1e3,
        "ms_forward": step_forward * 1e3,
        "ms_engine": (step_wall - step_forward) * 1e3,
        "matmul_share_of_op_time": matmul / total if total else None,
        "ops": [
            {
                "op": e.key,
                "self_ms_per_step": e.self_cpu_time_total / 1e3 / (len(steps) + 1),
                "calls_per_step": e.count / (len(steps) + 1),
                "share": e.self_cpu_time_total / total,
            }
            for e in top
        ],
    }
    print_report(result)
    save(result, args.json, quiet=True)
    return 0


if __name__ == "__main__":
    run_main(main)
