"""Training throughput of a recipe against the target's forward-only throughput, side by side.

Online distillation runs the frozen target forward on every batch, so the target's forward-only
tokens/s is the floor's ceiling: training can never be faster. For each batch we time, in
alternation, (a) the target's forward alone and (b) one full training step (target forward,
draft forward + backward, optimizer step), and report medians and their ratio.

    python scripts/bench_train.py configs/smollm2-135m-instruct/draft_lm.yaml --steps 10 --json runs/bench_train.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    p.add_argument("--steps", type=int, default=10, help="timed batches")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-rows", type=int, default=200, help="dataset rows to tokenise (enough for the batches)")
    p.add_argument("--json", default=None)
    p.add_argument("overrides", nargs="*", help="--section.key=value recipe overrides")
    args, extra = p.parse_known_args(argv)

    from draftsmith.train.kinds import load_recipe
    from draftsmith.train.distributed import shutdown as _shutdown
    from draftsmith.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(args.recipe, list(args.overrides) + extra + [f"--data.max_rows={args.max_rows}", "--logging.progress=false"])
        recipe.checkpoint.output_dir = tmp
        trainer = Trainer(recipe)
        acc, task, model, opt = trainer.acc, trainer.task, trainer.model, trainer.optimizer
        target = task.target.model
        batches = iter(trainer.loader)
        fwd, step = [], []
        for i in range(args.warmup + args.steps):
            batch = next(batches)
            n = batch["input_ids"].numel()
            t0 = time.perf_counter()
            with torch.no_grad():
                target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
            t1 = time.perf_counter()
            loss, _ = task.loss(model, batch, step=i)
            acc.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            t2 = time.perf_counter()
            if i >= args.warmup:
                fwd.append(n / (t1 - t0))
                step.append(n / (t2 - t1))
            print(f"batch {i}: target forward {n / (t1 - t0):8.0f} tok/s   train step {n / (t2 - t1):8.0f} tok/s", file=sys.stderr)
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
    }
    result["train_over_forward"] = result["train_tokens_per_s"] / result["target_forward_tokens_per_s"]
    print(f"{'what':<28}{'tokens/s':>10}")
    print(f"{'target forward only':<28}{result['target_forward_tokens_per_s']:>10.0f}")
    print(f"{'training step':<28}{result['train_tokens_per_s']:>10.0f}")
    print(f"training / forward-only: {result['train_over_forward']:.2f}x   ({result['batch_tokens']} tokens per batch, {result['device']}, {result['threads']} threads)")
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
