#!/usr/bin/env python
"""Check `draftsmith plan` against a real run: peak memory and training tokens/s, side by side.

Trains RECIPE for a few steps in this process, then plans the same recipe (one device) fed the
matmul rate measured on this device just before and just after the run (utilisation 1: the rate
is what this device reaches), and prints plan vs measured:

- memory: the plan's total (DDP, one device) against the run's peak, measured as
  CPU: the process's resident-set high-water mark (getrusage ru_maxrss) minus its resident set
     once torch, transformers and the trainer are imported (what the plan does not model);
  GPU: torch.cuda.max_memory_allocated();
- speed: the plan's tokens/s against the median logged training rate (the first window, warm-up,
  left out). Other processes on the machine slow both the matmul timing and the run: measure them
  back to back, as here, and say so with the figures.

    python scripts/plan_check.py configs/smollm2-135m-instruct/eagle3.yaml --steps 8 --rows 120 --batch-size 2 \
        --json runs/plan_check.json

--random-target trains over a randomly initialised target of the recipe's shape (its shipped
config, built on the device in the target's dtype) tokenised by tiny-random's byte-level
tokenizer: a real-scale memory and speed check where the weights are absent (the costs do not
depend on the weights or on which token ids the rows hold).
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import tempfile

from draftsmith.evaluation.benchkit import add_flags, parser, run_main, save


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_run(recipe, dtype: str, device: str) -> tuple[int, float, int, float, list[float]]:
    """Train `recipe` here between two timings of the matmul rate: the resident set before, the
    rate before, the peak memory, the rate after, and the logged training rates (warm-up left out)."""
    import torch

    from draftsmith.train.trainer.flops import measure_tflops
    from draftsmith.train.trainer.loop import train

    base = rss_bytes()
    before = measure_tflops(dtype, seconds=3.0, device=device)
    summary = train(recipe)
    cuda = device == "cuda"
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    after = measure_tflops(dtype, seconds=3.0, device=device)
    if summary.get("interrupted") or "history" not in summary:
        raise SystemExit(f"the run stopped early ({summary}): no rate to compare")
    rates = [h["train/tokens_per_s"] for h in summary["history"] if "train/tokens_per_s" in h][1:]
    return base, before, peak, after, rates


@contextlib.contextmanager
def random_target():
    """Inside, loading any target builds it from its config with random weights, directly on the
    device asked for and in the dtype asked for (never through host memory: an 8B target would
    take 32 GB of RAM in fp32), and every tokenizer is tiny-random's byte-level one."""
    from transformers import AutoModelForCausalLM

    from draftsmith.models import sources, target

    def build(name, dtype=None, device="cpu"):
        import torch

        config = sources.load_config(name)
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
        return model.eval()

    def tokenizer(name):
        return saved["tokenizer"]("tiny-random")

    saved = {"model": target.load_causal_lm, "tokenizer": sources.load_tokenizer}
    target.load_causal_lm, target.load_tokenizer, sources.load_tokenizer = build, tokenizer, tokenizer
    try:
        yield
    finally:
        target.load_causal_lm = saved["model"]
        target.load_tokenizer = sources.load_tokenizer = saved["tokenizer"]


def main(argv=None) -> int:
    p = parser(__doc__, recipe={}, steps=12)
    p.add_argument("--rows", type=int, default=200, help="data.max_rows: enough for the steps, quick to build")
    p.add_argument("--batch-size", type=int, default=None, help="optim.batch_size (default: the recipe's)")
    p.add_argument("--random-target", action="store_true", help="random weights of the target's shape (see above)")
    add_flags(p, json=None)
    args, overrides = p.parse_known_args(argv)
    with random_target() if args.random_target else contextlib.nullcontext():
        return check(args, overrides)


def check(args, overrides) -> int:
    import torch

    from draftsmith.plan import make_plan, planned_mixed_precision
    from draftsmith.train.config import load_recipe
    from draftsmith.train.data import build_data

    cuda = torch.cuda.is_available()
    out = tempfile.mkdtemp(prefix="plan_check-")
    recipe = load_recipe(
        args.recipe,
        [
            *overrides,
            f"--optim.max_steps={args.steps}",
            *([f"--optim.batch_size={args.batch_size}"] if args.batch_size else []),
            f"--data.max_rows={args.rows}",
            "--logging.log_every=2",
            "--logging.eval_every=0",
            "--logging.eval_batches=1",
            "--logging.acceptance_prompts=0",
            "--logging.progress=false",
            "--checkpoint.save_every=0",
            f"--checkpoint.output_dir={out}",
        ],
    )
    device = "cuda" if cuda else "cpu"
    dtype = "bfloat16" if planned_mixed_precision(recipe, device) == "bf16" else "float32"
    base, before, peak, after, rates = measure_run(recipe, dtype, device)
    measured_rate = statistics.median(rates)

    # The share of tokens the loss scores (the LM heads run there only), from the same rows.
    from draftsmith.models.sources import load_tokenizer

    data = build_data(recipe.data, load_tokenizer(recipe.model.target), progress=False)
    scored = float(data.train.loss_mask.float().mean()) if hasattr(data.train.loss_mask, "float") else 0.5

    tflops = (before + after) / 2
    plan = make_plan(recipe, gpus=1, gpu_tflops=tflops, utilisation=1.0, scored=scored, device=device)
    planned = plan.memory[0].total
    measured_mem = peak if cuda else peak - base
    result = {
        "recipe": args.recipe,
        "random_target": args.random_target,
        "device": torch.cuda.get_device_name(0) if cuda else _cpu_name(),
        "steps": args.steps,
        "tokens_per_step": plan.tokens_per_step,
        "scored_fraction": scored,
        "matmul_tflops": {"before": before, "after": after, "used": tflops, "dtype": dtype},
        "memory": {
            "planned_bytes": planned,
            "measured_bytes": measured_mem,
            "how": "torch.cuda.max_memory_allocated" if cuda else "ru_maxrss minus RSS after imports",
            "baseline_rss_bytes": None if cuda else base,
            "ratio": planned / measured_mem,
            "parts": plan.memory[0].__dict__,
        },
        "tokens_per_s": {
            "planned": plan.tokens_per_s,
            "measured": measured_rate,
            "windows": rates,
            "ratio": plan.tokens_per_s / measured_rate,
        },  # fmt: skip
        "flops_per_token": plan.flops_per_token,
    }
    print(
        f"memory: plan {planned / 1e9:.2f} GB, measured {measured_mem / 1e9:.2f} GB ({result['memory']['how']}): "
        f"{result['memory']['ratio']:.2f}x\n"
        f"tokens/s: plan {plan.tokens_per_s:.0f} (at {tflops * 1e3:.1f} GFLOP/s measured, {dtype}), measured "
        f"{measured_rate:.0f}: {result['tokens_per_s']['ratio']:.2f}x"
    )
    save(result, args.json, stamp=False, quiet=True)
    return 0


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


if __name__ == "__main__":
    run_main(main)
