"""`draftsmith train RECIPE [--output-dir D] [--resume] [--print-config] [--data-only] [--a.b=value ...]`.

`python -m draftsmith.train ...` (what `accelerate launch -m draftsmith.train` runs on every process)
is the same command: it goes through draftsmith/cli.py's parser, which takes this module's
`add_arguments` and `run` and hands the recipe overrides down as `args.overrides`.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import first_line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Train a drafter from a YAML recipe."
    p.epilog = "Any recipe key can be overridden: --optim.lr=3e-4 --data.max_rows 500"
    p.add_argument("recipe", help="YAML recipe, e.g. configs/tiny/draft_lm.yaml")
    p.add_argument("--output-dir", default=None, help="where checkpoints go (overrides checkpoint.output_dir)")
    p.add_argument(
        "--resume", action="store_true", help="continue from the newest complete checkpoint in the output dir"
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved recipe and exit")
    p.add_argument(
        "--data-only",
        action="store_true",
        help="prepare the data (regenerate it: data.regenerate=true; tokenise), print its counts and exit: "
        "e.g. regenerate through a server (data.regenerate_with=endpoint) into data.regenerated_path, stop it, "
        "then train with the recipe as it is",
    )


def build_parser() -> argparse.ArgumentParser:
    """The command's options alone (`draftsmith train`'s subparser holds the same)."""
    p = argparse.ArgumentParser(prog="draftsmith train")
    add_arguments(p)
    return p


def main(argv=None) -> int:
    """`python -m draftsmith.train ARGS` = `draftsmith train ARGS`."""
    from draftsmith.cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


def run(args) -> int:
    logging.getLogger("accelerate").setLevel(logging.WARNING)  # one line per file it saves otherwise
    from .config import dump_recipe, load_recipe

    if args.output_dir is not None and not args.output_dir.strip():  # "" is a mistake, not "use the recipe's"
        raise DraftsmithError('--output-dir "": name the run folder, or leave the flag out for the recipe\'s')
    recipe = load_recipe(args.recipe, args.overrides)
    if args.output_dir:
        recipe.checkpoint.output_dir = args.output_dir
    if args.print_config:
        print(dump_recipe(recipe), end="")
        return 0
    if args.data_only:
        return _data_only(recipe)
    from draftsmith.train.preflight import check_before_loading
    from draftsmith.train.trainer.checkpoint import check_output_dir, plan_resume

    check_before_loading(recipe, args.recipe)  # a missing input is told before torch and the target load

    # The output dir's checks, before torch and the models load (the trainer repeats them on every
    # rank, and under its lock): a refused run is told in a second and changes nothing.
    out = pathlib.Path(recipe.checkpoint.output_dir)
    check_output_dir(out)
    plan_resume(out, recipe.drafter.kind, args.resume or recipe.checkpoint.resume)
    print_plan(recipe)
    from draftsmith.train.trainer.loop import train

    summary = train(recipe, resume=True if args.resume else None)
    return 143 if summary.get("interrupted") else 0  # 128 + SIGTERM: schedulers requeue it


def print_plan(recipe) -> None:
    """`draftsmith plan`'s one-line summary, once (the main process), before training starts. It
    builds on the meta device (about a second); a plan that cannot be made is one line, never the
    end of the run."""
    import os

    if os.environ.get("RANK", "0") != "0":
        return
    try:
        import torch

        from draftsmith.plan import make_plan, planned_mixed_precision
        from draftsmith.train.trainer.flops import measure_tflops

        cuda = torch.cuda.is_available()
        cpu_dtype = "float32" if cuda or planned_mixed_precision(recipe, "cpu") != "bf16" else "bfloat16"
        plan = make_plan(
            recipe,
            gpus=int(os.environ.get("WORLD_SIZE", "1")),
            gpu_memory=torch.cuda.get_device_properties(0).total_memory if cuda else 80e9,
            # A GPU: H100's bf16 peak (draftsmith plan --gpu-tflops for others); a CPU: its own rate, timed briefly.
            gpu_tflops=989.0 if cuda else measure_tflops(cpu_dtype, n=512, seconds=0.3),
            device="cuda" if cuda else "cpu",
        )
        print(plan.summary(), flush=True)
    except Exception as e:  # noqa: BLE001 -- the plan is advice; the run goes on without it
        print(f"plan: not available ({type(e).__name__}: {first_line(e, 160)})", flush=True)


def _data_only(recipe) -> int:
    """Build the recipe's data as training would (the regeneration cache fills, resumably), no training."""
    import json

    from draftsmith.models import Target

    from .data import build_data

    d = recipe.data
    saved = bool(d.regenerated_path) and pathlib.Path(d.regenerated_path).expanduser().is_file()
    if not d.regenerate or d.regenerate_with == "endpoint" or saved:  # the tokenizer is all it needs
        from draftsmith.models.sources import load_tokenizer

        tokenizer, target = load_tokenizer(recipe.model.target), None
    else:
        target = Target.load(
            recipe.model.target,
            dtype="float32" if recipe.model.target_dtype == "auto" else recipe.model.target_dtype,
            device="cpu",
        )
        tokenizer = target.tokenizer
    data = build_data(d, tokenizer, target=target, progress=recipe.logging.progress)
    print(json.dumps(data.stats, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
