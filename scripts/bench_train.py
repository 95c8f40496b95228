"""Training throughput of a recipe against the target's forward-only throughput, side by side.

Online distillation runs the frozen target forward on every batch, so the target's forward-only
tokens/s is the floor's ceiling: training can never be faster. For each batch we time, in
alternation, (a) the target's forward alone and (b) one full training step (target forward,
draft forward + backward, optimizer step), and report medians and their ratio.

    python scripts/bench_train.py configs/smollm2-135m-instruct/draft_lm.yaml --steps 10 --json runs/bench_train.json
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time

import torch

from draftsmith.evaluation.benchkit import add_flags, operator_times, parser, run_main, save
from draftsmith.infer.hardware import cpu_info, format_cpu


def count_cpu_attention() -> None:
    """FlopCounterMode has formulas for the CUDA attention kernels only: on a CPU, SDPA runs
    aten::_scaled_dot_product_flash_attention_for_cpu and counted 0 FLOPs, which left the target's
    attention out of the floor. Count it as the CUDA kernels are counted: two matmuls forward
    (4·B·H·Sq·Sk·d, H the query heads: grouped KV heads do the same arithmetic), four backward."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    aten = torch.ops.aten
    if aten._scaled_dot_product_flash_attention_for_cpu in flop_registry:
        return

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu)
    def _forward(query_shape, key_shape, *args, out_shape=None, **kwargs) -> int:
        b, h, sq, d = query_shape
        return 4 * b * h * sq * key_shape[-2] * d

    @register_flop_formula(aten._scaled_dot_product_flash_attention_for_cpu_backward)
    def _backward(grad_out_shape, query_shape, key_shape, *args, out_shape=None, **kwargs) -> int:
        b, h, sq, d = query_shape
        return 8 * b * h * sq * key_shape[-2] * d


def print_profile(prof, tokens: int) -> None:
    events, total = operator_times(prof)
    print(f"profiled step: {total / 1e3:.0f} ms of operator time ({tokens} tokens); top operators by self CPU time")
    print(f"{'operator':<44}{'ms':>9}{'calls':>8}{'share':>8}")
    for e in events[:15]:
        print(
            f"{e.key[:43]:<44}{e.self_cpu_time_total / 1e3:>9.1f}{e.count:>8}"
            f"{100 * e.self_cpu_time_total / total:>7.1f}%"
        )


def device_sync(device):
    """A call that waits for `device` to finish what was queued on it: CUDA kernels run
    asynchronously, so a clock read without it times the launches, not the work."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_steps(trainer, batches, args) -> tuple[list, list, list, int]:
    """Per batch, in alternation, the target's forward alone and one full training step: forward
    and training tokens/s, where the step's time went (plus one profiled step with --profile),
    and the last batch's token count."""
    acc, task, model, opt = trainer.acc, trainer.task, trainer.model, trainer.optimizer
    target = task.target.model
    sync = device_sync(acc.device)
    inside = []  # seconds spent in the target's forward during the current training step
    forward = target.forward

    def timed_forward(*a, **k):
        sync()
        t = time.perf_counter()
        out = forward(*a, **k)
        sync()
        inside.append(time.perf_counter() - t)
        return out

    fwd, step, parts = [], [], []
    for i in range(args.warmup + args.steps + (1 if args.profile else 0)):
        batch = next(batches)
        n = batch["input_ids"].numel()
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
        sync()
        t1 = time.perf_counter()
        profiling = args.profile and i == args.warmup + args.steps  # one extra step, untimed
        prof = (
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            if profiling
            else contextlib.nullcontext()
        )
        inside.clear()
        target.forward = timed_forward
        with prof:
            loss, _ = task.loss(model, batch, step=i)
            target.forward = forward
            sync()
            ta = time.perf_counter()
            acc.backward(loss)
            sync()
            tb = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
        t2 = time.perf_counter()
        if profiling:
            print_profile(prof, n)
        elif i >= args.warmup:
            fwd.append(n / (t1 - t0))
            step.append(n / (t2 - t1))
            parts.append(
                {
                    "target_forward": sum(inside),
                    "draft_forward_and_loss": ta - t1 - sum(inside),
                    "backward": tb - ta,
                    "optimizer": t2 - tb,
                }
            )
        print(
            f"batch {i}: target forward {n / (t1 - t0):8.0f} tok/s   train step {n / (t2 - t1):8.0f} tok/s",
            file=sys.stderr,
        )
    return fwd, step, parts, n


def count_flops(trainer, batches, step: int) -> tuple[dict, dict]:
    """FLOPs of the target's forward and of a training step on one more batch, and the shapes
    scripts/flop_bound.py's formula needs to redo the count."""
    acc, task, model, opt = trainer.acc, trainer.task, trainer.model, trainer.optimizer
    target = task.target.model
    # The same quantities counted in FLOPs (torch's FlopCounterMode, one more batch): the
    # ratio the step's arithmetic allows, before any overhead.
    from torch.utils.flop_counter import FlopCounterMode

    count_cpu_attention()
    batch = next(batches)
    with FlopCounterMode(display=False) as floor_flops, torch.no_grad():
        target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    with FlopCounterMode(display=False) as step_flops:
        loss, _ = task.loss(model, batch, step=step)
        acc.backward(loss)
    opt.zero_grad(set_to_none=True)
    flops = {"target_forward": floor_flops.get_total_flops(), "train_step": step_flops.get_total_flops()}
    c = target.config  # what scripts/flop_bound.py's formula needs to redo this count for any target
    flop_model = {
        "seq_len": int(batch["input_ids"].shape[1]),
        "scored_fraction": float(batch["loss_mask"].sum() / batch["loss_mask"].numel()),  # of all (padded) rows
        "target_shape": {
            "d": c.hidden_size,
            "I": c.intermediate_size,
            "L": c.num_hidden_layers,
            "H": c.num_attention_heads,
            "KV": c.num_key_value_heads,
            "hd": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
            "V": target.get_output_embeddings().weight.shape[0],
        },
    }
    return flops, flop_model


def print_summary(result: dict) -> None:
    flops = result["flops_per_batch"]
    print(f"{'what':<28}{'tokens/s':>10}")
    print(f"{'target forward only':<28}{result['target_forward_tokens_per_s']:>10.0f}")
    print(f"{'training step':<28}{result['train_tokens_per_s']:>10.0f}")
    print(
        "one step, ms: "
        + ", ".join(f"{k} {v:.0f}" for k, v in result["step_parts_ms"].items())
        + f"   (target forward alone {result['target_forward_ms']:.0f})"
    )
    print(
        f"FLOPs per batch: target forward {flops['target_forward'] / 1e12:.2f} T, training step "
        f"{flops['train_step'] / 1e12:.2f} T:"
        f" at equal speed training could reach {result['flop_bound']:.2f}x the forward-only rate"
    )
    print(f"on {format_cpu(result['cpu'])}")
    print(
        f"training / forward-only: {result['train_over_forward']:.2f}x   ({result['batch_tokens']} tokens per batch, "
        f"{result['device']}, {result['threads']} threads)"
    )


def main(argv=None) -> int:
    p = parser(__doc__, recipe={}, steps={"default": 10, "help": "timed batches"})
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-rows", type=int, default=200, help="dataset rows to tokenise (enough for the batches)")
    add_flags(p, json=None)
    p.add_argument("--profile", action="store_true", help="profile one more step: operators by self CPU time")
    p.add_argument("overrides", nargs="*", help="--section.key=value recipe overrides")
    args, extra = p.parse_known_args(argv)

    from draftsmith.train.config import load_recipe
    from draftsmith.train.distributed import shutdown as _shutdown
    from draftsmith.train.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(
            args.recipe, list(args.overrides) + extra + [f"--data.max_rows={args.max_rows}", "--logging.progress=false"]
        )
        recipe.checkpoint.output_dir = tmp
        trainer = Trainer(recipe)
        acc, batches = trainer.acc, iter(trainer.loader)
        fwd, step, parts, n = time_steps(trainer, batches, args)
        flops, flop_model = count_flops(trainer, batches, args.warmup + args.steps + 1)
        _shutdown()

    d = recipe.drafter
    result = {
        "recipe": args.recipe,
        "target": recipe.model.target,
        "drafter": d.kind,
        "init": getattr(d, "init", None),
        "loss": getattr(d, "loss", None),
        "batch_tokens": recipe.optim.batch_size * recipe.data.max_length,
        "mixed_precision": recipe.optim.mixed_precision,
        "device": str(acc.device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "steps": args.steps,
        "target_forward_tokens_per_s": statistics.median(fwd),
        "train_tokens_per_s": statistics.median(step),
        "target_forward_ms": statistics.median(n / x for x in fwd) * 1e3,
        # where one training step's time goes (medians, ms): the target's forward inside it, the
        # draft's forward and loss, backward, optimizer
        "flops_per_batch": flops,
        "flop_bound": flops["target_forward"]
        / flops["train_step"],  # train/forward-only if every FLOP ran at one speed
        "flop_model": flop_model,
        "ttt_steps": getattr(d, "ttt_steps", None),
        "draft_vocab_size": getattr(d, "draft_vocab_size", None),
        "step_parts_ms": {key: statistics.median(p[key] for p in parts) * 1e3 for key in parts[0]},
        "cpu": cpu_info(),
    }
    result["train_over_forward"] = result["train_tokens_per_s"] / result["target_forward_tokens_per_s"]
    print_summary(result)
    save(result, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
