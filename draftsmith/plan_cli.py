"""The `draftsmith plan` command: its flags, its table and its JSON (the figures: draftsmith/plan.py,
the whole job's phases: draftsmith/plan_job.py, the regeneration server: draftsmith/plan_regen.py).

No torch or transformers at import: the CLI builds its parser without them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib

from draftsmith import plan_regen
from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_json
from draftsmith.plan import (
    DEFAULT_SCORED,
    STRATEGIES,
    Plan,
    _gb,
    make_plan,
    parse_bytes,
    planned_mixed_precision,
    smallest_change,
)
from draftsmith.plan_job import DEFAULT_BANDWIDTH, render_job


def add_arguments(p: argparse.ArgumentParser) -> None:
    # Every number is checked as it is parsed (argparse's one line), never as a figure in the table.
    p.add_argument("recipe", help="YAML recipe, e.g. configs/llama-3.1-8b-instruct/eagle3.yaml")
    p.add_argument("--gpus", type=_at_least_one, default=8, help="GPUs per node (default 8)")
    p.add_argument("--nodes", type=_at_least_one, default=1, help="nodes (default 1)")
    p.add_argument(
        "--gpu-memory", type=_memory_size, default=80e9, help="memory of one GPU, e.g. 80GB, 141GB (default 80GB)"
    )
    p.add_argument(
        "--gpu-tflops",
        type=_tflops,
        default=989.0,
        help="one GPU's dense peak in TFLOP/s at the compute dtype (default 989: H100 SXM bf16), "
        "or 'measured': time matmuls on this machine's device (a CPU: --gpus 1)",
    )
    p.add_argument(
        "--utilisation",
        type=_fraction,
        default=0.4,
        help="share of the peak training reaches, in (0, 1] (default 0.4: near the MFU reported for Llama 3's "
        "bf16 training on H100s, 38-43%%)",
    )
    p.add_argument(
        "--gpu-bandwidth",
        type=_memory_size,
        default=DEFAULT_BANDWIDTH,
        help="one GPU's memory bandwidth per second, for regenerating replies, e.g. 4.8TB (default 3.35TB: H100 SXM)",
    )
    p.add_argument(
        "--scored-fraction",
        type=_fraction,
        default=DEFAULT_SCORED,
        help=f"share of tokens the loss scores, in (0, 1] (the replies; default {DEFAULT_SCORED})",
    )
    p.add_argument("--epoch-tokens", type=_positive, default=None, help="tokens in one epoch (default: from the data)")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cuda (default) or cpu: sets the dtypes 'auto' picks"
    )
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=None,
        help="the strategy you will launch with (its configs/accelerate/*.yaml); default: fits if any strategy fits",
    )
    plan_regen.add_arguments(p, _at_least_one)
    p.add_argument("--json", type=_json_path, default=None, help="write every figure to this JSON file")


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _tflops(text: str) -> float | str:
    if text == "measured":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite TFLOP/s figure > 0, or 'measured'")
    return value


def _memory_size(text: str) -> float:
    try:
        return parse_bytes(text)
    except DraftsmithError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--gpu-memory ")) from None


def _json_path(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("name a file, e.g. plan.json")
    return text


def run(args) -> int:
    """`draftsmith plan`; args.overrides: the recipe overrides (draftsmith/cli.py hands them down)."""
    from draftsmith.train.config import load_recipe

    if args.json:  # before any work: the table is not lost to a path that cannot be written
        from draftsmith.evaluation.bench import check_output_path

        check_output_path(args.json, "--json")
    recipe = load_recipe(args.recipe, args.overrides)
    recipe._path = args.recipe
    tflops = args.gpu_tflops
    if tflops == "measured":
        from draftsmith.train.trainer.flops import measure_tflops

        device = "cuda" if args.device == "cuda" else "cpu"
        dtype = "bfloat16" if planned_mixed_precision(recipe, device) == "bf16" else "float32"
        tflops = measure_tflops(dtype, device=device)
    plan = make_plan(
        recipe,
        recipe_path=args.recipe,
        gpus=args.gpus,
        nodes=args.nodes,
        gpu_memory=args.gpu_memory,
        gpu_tflops=tflops,
        utilisation=args.utilisation,
        scored=args.scored_fraction,
        epoch_tokens=args.epoch_tokens,
        device=args.device,
        bandwidth=args.gpu_bandwidth,
        regen_replicas=args.regen_replicas,
        regen_tp=args.regen_tp,
        regen_concurrency=args.regen_concurrency,
    )
    print(render(plan))
    if args.json:
        _write_json(plan, args.json)
    if args.strategy and args.strategy not in plan.fitting:  # advice: another strategy first
        advice = smallest_change(recipe, plan._built, plan.world, plan.gpu_memory, plan.max_length, plan.batch_size,
                                 strategy=args.strategy)  # fmt: skip
        raise DraftsmithError(
            f"{plan.recipe} does not fit with {args.strategy} on {_gb(plan.gpu_memory)} GPUs: {advice}"
        )
    if not plan.fitting:
        raise DraftsmithError(f"{plan.recipe} does not fit on {_gb(plan.gpu_memory)} GPUs: {plan.advice}")
    return 0


def _write_json(plan: Plan, path: str) -> None:
    """--json: the plan through fileio.write_json (atomic: a full disk or a vanished folder leaves
    no half-written file), a failure said in one line."""
    path = pathlib.Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, to_dict(plan), indent=1)
    except OSError as e:
        raise DraftsmithError(
            f"--json {path}: cannot write it ({e.strerror or e}); the plan is printed above"
        ) from None


def to_dict(plan: Plan) -> dict:
    out = dataclasses.asdict(plan)
    out["fitting"] = plan.fitting
    out["summary"] = plan.summary()
    return out


def render(plan: Plan) -> str:
    lines = [
        f"{plan.recipe or plan.target}: {plan.kind} for {plan.target}",
        f"  parameters: target {plan.target_params:,} (frozen), drafter {plan.drafter_params:,} (trained); "
        f"features {plan.features}",
        f"  per micro-batch: {plan.batch_size} x {plan.max_length} tokens; {plan.tokens_per_step:,} tokens per "
        f"optimizer step on {plan.world} device(s)",
        "",
        "  | strategy | target | drafter | grads | optimizer | activations | features | total | fits |",
        "  |---|---|---|---|---|---|---|---|---|",
    ]
    for m in plan.memory:
        cells = [m.target_weights, m.drafter_weights, m.gradients, m.optimizer, m.activations, m.features, m.total]
        lines.append(f"  | {m.strategy} | " + " | ".join(_gb(c) for c in cells) + f" | {'yes' if m.fits else 'no'} |")
    f = plan.flops_per_token
    lines += [
        "",
        f"  FLOPs per token: training {f['training'] / 1e9:.2f} G (target {f['target_in_training'] / 1e9:.2f} G + 3 x "
        f"draft {f['draft_forward'] / 1e9:.2f} G; LM heads on {f['scored_fraction']:.0%} of rows)",
        f"  speed: ~{plan.tokens_per_s:,.0f} tokens/s at {plan.gpu_tflops:g} TFLOP/s x {plan.utilisation:g} "
        f"on {plan.world} device(s)",
    ]
    if plan.epoch_tokens:
        lines.append(f"  epoch: {plan.epoch_tokens / 1e6:.1f}M tokens, ~{plan.epoch_hours:.2f} h")
        if plan.steps is not None:
            lines.append(f"  run: {plan.steps:,} optimizer steps = {plan.epochs:.2f} epochs on {plan.world} device(s)")
    else:
        lines.append("  epoch: corpus size unknown (pass --epoch-tokens N)")
    if plan.feature_cache_bytes:
        lines.append(f"  feature cache on disk (bf16, one epoch): {_gb(plan.feature_cache_bytes)}")
    lines += render_job(plan)
    lines.append(plan.summary())
    return "\n".join(lines)


__all__ = ["add_arguments", "render", "run", "to_dict"]
