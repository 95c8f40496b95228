"""Training throughput of recipes against the target's forward-only throughput, side by side.

Online distillation runs the frozen target forward on every batch, so the target's forward-only
tokens/s is the floor's ceiling: training can never be faster. For each batch we time, in
alternation, (a) the target's forward alone and (b) one full training step (target forward,
draft forward + backward, optimizer step), and report medians and their ratio.

Several recipes and precision modes run in one process, one after another, and end in one table:
`--modes before,auto` measures each recipe as the trainer ran before `optim.mixed_precision:
auto` (fp32, DFlash's target LM head over every position) and as auto runs it on this machine.
A mode is `before` or a value of optim.mixed_precision (no, bf16, fp16, auto).

    python scripts/bench_train.py configs/smollm2-135m-instruct/draft_lm.yaml --steps 10 --json runs/bench_train.json
    R=configs/smollm2-135m-instruct
    python scripts/bench_train.py $R/draft_lm.yaml $R/eagle.yaml $R/eagle3.yaml $R/medusa.yaml $R/medusa2.yaml \
        $R/dflash.yaml $R/pard.yaml --modes before,auto --steps 10 --json runs/bench_train_precision.json
"""

from __future__ import annotations

import contextlib
import gc
import pathlib
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
    acc, task, opt = trainer.acc, trainer.task, trainer.optimizer
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
            loss, _ = trainer.loss(batch, i)  # under the run's autocast, as the trainer computes it
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
    acc, task, opt = trainer.acc, trainer.task, trainer.optimizer
    target = task.target.model
    # The same quantities counted in FLOPs (torch's FlopCounterMode, one more batch): the
    # ratio the step's arithmetic allows, before any overhead.
    from torch.utils.flop_counter import FlopCounterMode

    count_cpu_attention()
    batch = next(batches)
    with FlopCounterMode(display=False) as floor_flops, torch.no_grad():
        target(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    with FlopCounterMode(display=False) as step_flops:
        loss, _ = trainer.loss(batch, step)
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


MODES = ("before", "no", "bf16", "fp16", "auto")


class AllLogitRows:
    """Features whose target LM head ran over every position, as DFlash's task read them before
    it asked for the scored rows only (`before` mode): each (b, t) indexes its own row."""

    def __init__(self, features):
        self.features = features

    def __call__(self, batch, want_logits=False, logit_rows=None):
        from draftsmith.train.features.online import Features

        full = self.features(batch, want_logits=want_logits)
        if full.logits is None:
            return full
        B, T, V = full.logits.shape
        index = torch.arange(B * T, device=full.logits.device).view(B, T)
        return Features(full.hidden, full.logits.reshape(B * T, V), index)


def parse_modes(text: str | None) -> list[str | None]:
    """--modes "before,auto" -> ["before", "auto"]; None -> [None]: the recipe as it is."""
    if text is None:
        return [None]
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        from draftsmith.errors import DraftsmithError

        raise DraftsmithError(f"--modes {text!r}: give a comma-separated list of {', '.join(MODES)}")
    return modes


def mode_overrides(mode: str | None) -> list[str]:
    """The recipe overrides of a mode. `before` is fp32 (mixed precision no: model.target_dtype
    auto then resolves as it did, bf16 on CUDA only) with DFlash's all-rows logits (AllLogitRows)."""
    if mode is None:
        return []
    return [f'--optim.mixed_precision="{"no" if mode == "before" else mode}"']  # quoted: YAML reads a bare no as false


def fresh_accelerate() -> None:
    """accelerate keeps one process-wide state whose mixed precision cannot change: each run
    starts from a clean one."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def endless(loader, path: str):
    """The loader's batches over and over: the timed steps, the profiled one and the FLOP count can
    need more batches than --max-rows gives a recipe (one that keeps conversations apart, or a
    larger batch, makes fewer); throughput does not care that a batch comes round again."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            from draftsmith.errors import DraftsmithError

            raise DraftsmithError(f"{path}: the data gave no training batch; raise --max-rows")


def bench_one(path: str, mode: str | None, overrides: list[str], args) -> dict:
    """One recipe in one mode: the timed steps, the FLOP count and what ran, as a dict."""
    from draftsmith.train.config import load_recipe
    from draftsmith.train.distributed import shutdown as _shutdown
    from draftsmith.train.trainer.loop import Trainer

    fresh_accelerate()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe(
            path,
            overrides
            + mode_overrides(mode)
            + [f"--data.max_rows={args.max_rows}", "--logging.progress=false", f"--checkpoint.output_dir={tmp}"],
        )
        trainer = Trainer(recipe)
        try:
            if mode == "before" and recipe.drafter.kind == "dflash":
                trainer.task.features = AllLogitRows(trainer.task.features)
            acc, batches = trainer.acc, endless(trainer.loader, path)
            fwd, step, parts, n = time_steps(trainer, batches, args)
            flops, flop_model = count_flops(trainer, batches, args.warmup + args.steps + 1)
            target_dtype = str(trainer.target.dtype).removeprefix("torch.")
        finally:
            trainer.close()
            _shutdown()
    del trainer
    gc.collect()

    d = recipe.drafter
    result = {
        "recipe": path,
        "mode": mode or recipe.optim.mixed_precision,
        "target": recipe.model.target,
        "drafter": d.kind,
        "init": getattr(d, "init", None),
        "loss": getattr(d, "loss", None),
        "batch_tokens": recipe.optim.batch_size * recipe.data.max_length,
        "mixed_precision": acc.mixed_precision,  # as resolved ("auto" -> bf16 or no)
        "mixed_precision_reason": getattr(acc, "mixed_precision_reason", "asked for"),
        "target_dtype": target_dtype,
        "dflash_target_logits": ("every position" if mode == "before" else "scored rows")
        if d.kind == "dflash"
        else None,
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
    return result


def comparison(runs: list[dict]) -> list[dict]:
    """Per recipe: training tokens/s in each mode and each mode's over the first mode's."""
    rows = {}
    for r in runs:
        row = rows.setdefault(r["recipe"], {"recipe": r["recipe"], "drafter": r["drafter"], "modes": {}})
        row["modes"][r["mode"]] = {
            "mixed_precision": r["mixed_precision"],
            "target_dtype": r["target_dtype"],
            "train_tokens_per_s": r["train_tokens_per_s"],
            "target_forward_tokens_per_s": r["target_forward_tokens_per_s"],
        }
    for row in rows.values():
        first = next(iter(row["modes"].values()))["train_tokens_per_s"]
        for m in row["modes"].values():
            m["over_first"] = m["train_tokens_per_s"] / first
    return list(rows.values())


SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def print_comparison(table: list[dict]) -> None:
    """One line per recipe and mode: the autocast and target dtypes it ran, training and
    forward-only tokens/s, and training tokens/s over the recipe's first mode."""
    print(
        f"\n{'recipe':<22}{'mode':<8}{'autocast':>9}{'target':>8}{'train tok/s':>13}{'forward tok/s':>15}{'x first':>9}"
    )
    for row in table:
        for mode, c in row["modes"].items():
            print(
                f"{pathlib.Path(row['recipe']).stem[:21]:<22}{mode:<8}{c['mixed_precision']:>9}"
                f"{SHORT.get(c['target_dtype'], c['target_dtype']):>8}{c['train_tokens_per_s']:>13.0f}"
                f"{c['target_forward_tokens_per_s']:>15.0f}{c['over_first']:>9.2f}"
            )


def main(argv=None) -> int:
    p = parser(__doc__, steps={"default": 10, "help": "timed batches"})
    p.add_argument("recipes", nargs="+", help="recipe YAML files, measured one after another")
    p.add_argument("--modes", help=f"comma-separated: {', '.join(MODES)} (default: the recipe as it is)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-rows", type=int, default=200, help="dataset rows to tokenise (enough for the batches)")
    add_flags(p, json=None)
    p.add_argument("--profile", action="store_true", help="profile one more step: operators by self CPU time")
    args, overrides = p.parse_known_args(argv)  # the rest: --section.key=value recipe overrides
    modes = parse_modes(args.modes)

    runs = []
    for path in args.recipes:
        for mode in modes:
            print(f"\n== {path}, mode {mode or 'as the recipe says'}", flush=True)
            result = bench_one(path, mode, list(overrides), args)
            print_summary(result)
            runs.append(result)
    if len(runs) == 1:  # one run: its dict as it is (what scripts/flop_bound.py --check reads)
        save(runs[0], args.json)
        return 0
    table = comparison(runs)
    print_comparison(table)
    print(f"on {format_cpu(runs[0]['cpu'])}, {runs[0]['threads']} threads")
    save({"modes": [r["mode"] for r in runs[: len(modes)]], "comparison": table, "runs": runs}, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
