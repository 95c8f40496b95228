"""`python -m draftsmith.train.features RECIPE --output DIR`: extract the target's hidden states
for a recipe into an offline feature cache (train/features.py holds the cache itself). Its own
module because it reads the table of kinds, whose tasks import train/features.py.
"""

from __future__ import annotations

import argparse
import logging
import sys

from draftsmith.errors import DraftsmithError, run_command

from .features import CACHE_DTYPES, check_layers, extract, num_hidden_states
from .kinds import TASKS

log = logging.getLogger("draftsmith.train")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m draftsmith.train.features",
        allow_abbrev=False,
        description="Extract the target's hidden states for a recipe into an offline feature cache.",
        epilog="Any recipe key can be overridden: --data.max_rows=500. Rerun the same "
        "command after a kill: finished shards are kept.",
    )
    p.add_argument("recipe", help="YAML recipe of an EAGLE drafter")
    p.add_argument("--output", required=True, help="the cache folder")
    p.add_argument("--shard-rows", type=int, default=64, help="training rows per shard file")
    p.add_argument("--batch-size", type=int, default=4, help="rows per target forward")
    p.add_argument("--dtype", default="bfloat16", choices=list(CACHE_DTYPES), help="stored dtype")
    p.add_argument("--layers", default=None, help="hidden-state indices instead of the drafter's, e.g. 2,5,-1")
    return p


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, rest = build_parser().parse_known_args(argv)
    return run_command(_run, args, rest)


def _run(args, rest: list[str]) -> int:
    from .data import build_data
    from .distributed import load_target, make_accelerator, outside_zero_init, shutdown
    from .kinds import load_recipe

    recipe = load_recipe(args.recipe, rest)
    layers = _parse_layers(args.layers) if args.layers else None
    acc = make_accelerator(recipe)
    main = acc.is_main_process
    try:
        with outside_zero_init(acc):  # the target stays whole, as in training
            target = load_target(recipe, acc)
        layers = layers or _drafter_layers(recipe, target)
        check_layers(layers, num_hidden_states(target.config), target.name)  # before the data work
        with acc.main_process_first():
            data = build_data(recipe.data, target.tokenizer, target=target, progress=main and recipe.logging.progress)
        m = extract(
            target,
            layers,
            data.train,
            args.output,
            max_length=recipe.data.max_length,
            shard_rows=args.shard_rows,
            accelerator=acc,
            progress=main and recipe.logging.progress,
            batch_size=args.batch_size,
            dtype=args.dtype,
        )
    finally:
        shutdown()
    if main:
        log.info(
            "feature cache %s: %d rows, %d tokens, layers %s, %.1f MB in %d shards",
            args.output,
            m["num_rows"],
            m["num_tokens"],
            m["layers"],
            m["bytes"] / 1e6,
            len(m["shards"]),
        )
    return 0


def _parse_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise DraftsmithError(f"--layers {text!r}: expected comma-separated integers, e.g. 2,5,-1") from None


def _drafter_layers(recipe, target) -> tuple[int, ...]:
    task = TASKS.get(recipe.drafter.kind)
    if not hasattr(task, "feature_layers"):
        raise DraftsmithError(
            f"drafter kind {recipe.drafter.kind} does not read target hidden states; nothing to extract"
        )
    return tuple(task.feature_layers(recipe.drafter, target.config))


if __name__ == "__main__":
    sys.exit(main())
