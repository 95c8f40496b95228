"""The quickstart's step cap: optimizer steps its time budget is expected to reach on this device,
which sets the cosine schedule's length (the time budget stops the run either way).

A CPU: 22 steps a minute of the quick recipe (configs/smollm2-135m-instruct/eagle3_quick.yaml:
2 rows of 512 tokens, 2 training-time-test steps), as timed on 2 cores of an AMD EPYC with
AVX-512; a faster CPU ends the schedule before the budget, and on a slower one the budget stops
the run before the schedule ends. A GPU: the
rate `draftsmith plan` expects on one GPU of its timed bf16 matmul rate x the plan's utilisation,
at most GPU_MAX_STEPS_PER_S (a small model's step is bound by its thousands of kernel launches, some
10 us each, not by its FLOPs).
    python scripts/quickstart_steps.py RECIPE MINUTES   -> prints the step cap
"""

from __future__ import annotations

import sys

CPU_STEPS_PER_MINUTE = 22
MIN_STEPS = 4
GPU_MAX_STEPS_PER_S = 10


def steps_per_minute(recipe_path: str, cuda: bool, tflops: float | None = None) -> float:
    if not cuda:
        return CPU_STEPS_PER_MINUTE
    from draftsmith.plan import make_plan
    from draftsmith.train.config import load_recipe

    if tflops is None:
        from draftsmith.train.trainer.flops import measure_tflops

        tflops = measure_tflops("bfloat16", device="cuda")
    plan = make_plan(load_recipe(recipe_path, []), gpus=1, gpu_tflops=tflops, device="cuda")
    per_s = min(GPU_MAX_STEPS_PER_S, plan.tokens_per_s / plan.tokens_per_step)
    return max(CPU_STEPS_PER_MINUTE, per_s * 60)


def step_cap(recipe_path: str, minutes: float, cuda: bool, tflops: float | None = None) -> int:
    return max(MIN_STEPS, int(steps_per_minute(recipe_path, cuda, tflops) * minutes))


if __name__ == "__main__":
    import torch

    print(step_cap(sys.argv[1], float(sys.argv[2]), torch.cuda.is_available()))
