"""`draftsmith features RECIPE --output-dir DIR [--engine vllm ...]`: extract the target's hidden
states for a recipe into an offline feature cache (train/features/cache.py holds the cache
itself). Its own module because it reads the table of kinds, whose tasks import
train/features/.

draftsmith/cli.py's parser takes the options train/cli_options.py declares and this module's
`run`, handing down the recipe overrides (`args.overrides`) and, for `--engine vllm`
(train/features/vllm.py), the extractor that starts vLLM: this layer does not import
draftsmith.shipping.engines. `python -m draftsmith.train.features RECIPE --output DIR` (or under
`accelerate launch -m`) runs the same `run` through `main` below, with transformers only (or a
folder vLLM already wrote).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from draftsmith.errors import DraftsmithError, run_command
from draftsmith.kinds import KINDS
from draftsmith.train.cli_options import features_arguments

log = logging.getLogger("draftsmith.train")


def build_parser() -> argparse.ArgumentParser:
    """`python -m draftsmith.train.features`'s parser (`draftsmith features`' subparser holds the same options)."""
    p = argparse.ArgumentParser(prog="python -m draftsmith.train.features")
    features_arguments(p)
    return p


def main(argv=None, engines: dict | None = None) -> int:
    """`python -m draftsmith.train.features`: the recipe overrides are the tokens no option claims,
    as in draftsmith/cli.py. engines: engine name -> the extractor class that starts it."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, rest = build_parser().parse_known_args(argv)
    args.overrides = rest
    return run_command(run, args, engines)


def run(args, engines: dict | None = None) -> int:
    """The command (args.overrides: the recipe overrides); engines: engine name -> the extractor
    class that starts it (`draftsmith features` passes draftsmith.shipping.engines')."""
    if args.engine == "vllm":
        return _run_vllm(args, engines)
    return _run(args)


def _run_vllm(args, engines) -> int:
    """The recipe's data, vLLM's hidden states, our cache (train/features/vllm.py)."""
    check_output_folder(args.output, "--output")
    m = _extract_with_vllm(args, engines)
    log.info(
        "feature cache %s (from vLLM): %d rows, %d tokens, layers %s, %.1f MB in %d shards",
        args.output,
        m["num_rows"],
        m["num_tokens"],
        m["layers"],
        m["bytes"] / 1e6,
        len(m["shards"]),
    )
    return 0


def _run(args) -> int:
    from draftsmith.train.config import load_recipe
    from draftsmith.train.data import build_data
    from draftsmith.train.distributed import load_target, make_accelerator, outside_zero_init, shutdown
    from draftsmith.train.features import check_distinct_layers, check_layers, extract, num_hidden_states

    check_output_folder(args.output, "--output")  # before the target loads: not a traceback at the first shard
    recipe = load_recipe(args.recipe, args.overrides)
    layers = _parse_layers(args.layers) if args.layers is not None else None  # "" is refused, not the default
    acc = make_accelerator(recipe)
    main = acc.is_main_process
    try:
        with outside_zero_init(acc):  # the target stays whole: the extraction runs it
            target = load_target(recipe, acc, parts="whole")
        layers = layers or _drafter_layers(recipe, target)
        check_layers(layers, num_hidden_states(target.config), target.name)  # before the data work
        if args.layers is not None:
            check_distinct_layers(layers, num_hidden_states(target.config))
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


def _extract_with_vllm(args, engines) -> dict:
    from draftsmith.train.config import load_recipe
    from draftsmith.train.data import build_data
    from draftsmith.train.distributed import load_target, make_accelerator, shutdown
    from draftsmith.train.features import check_distinct_layers, check_layers, num_hidden_states
    from draftsmith.train.features.vllm import EngineHiddenStates, HiddenStatesFolder, extract_vllm, parse_engine_args

    engine_args = parse_engine_args(args)
    factory = (engines or {}).get("vllm")
    if factory is None and not args.from_hidden_states:
        raise DraftsmithError(
            "--engine vllm starts vLLM through `draftsmith features` (python -m draftsmith.train.features runs "
            "transformers only, or reads an existing folder with --from-hidden-states DIR)"
        )
    recipe = load_recipe(args.recipe, args.overrides)
    acc = make_accelerator(recipe)
    try:
        if acc.num_processes > 1:
            raise DraftsmithError(
                "--engine vllm runs in one process (vLLM shards the target itself: --tensor-parallel-size, "
                "--pipeline-parallel-size): run it without accelerate launch"
            )
        # Of the target, this process needs its name, revision, tokenizer (the data) and final norm,
        # for the manifest and the trainer's check: its feature readers, on the CPU (vLLM holds the
        # GPUs), in the dtype training will use (the manifest records it).
        target = load_target(recipe, acc, parts="readers", device="cpu")
        layers = _parse_layers(args.layers) if args.layers is not None else _drafter_layers(recipe, target)
        check_layers(layers, num_hidden_states(target.config), target.name)
        if args.layers is not None:
            check_distinct_layers(layers, num_hidden_states(target.config))
        data = build_data(recipe.data, target.tokenizer, target=target, progress=recipe.logging.progress)
        hidden = target.config.get_text_config().hidden_size
        if args.from_hidden_states:

            def source(aux, staging):
                return HiddenStatesFolder(
                    args.from_hidden_states, target_name=target.name, hidden_size=hidden, aux_layers=aux
                )

        else:

            def source(aux, staging):
                extractor = factory(
                    target.source.path,
                    aux_layers=list(aux),
                    storage=staging,
                    target_name=target.name,
                    dtype=str(target.dtype).removeprefix("torch."),
                    max_model_len=recipe.data.max_length + 1,  # the prompt, then the one token vLLM generates
                    engine_args=engine_args,
                    log_path=args.vllm_log or os.path.join(args.output, "vllm.log"),
                )
                return EngineHiddenStates(extractor, hidden_size=hidden, aux_layers=aux)

        return extract_vllm(
            target,
            layers,
            data.train,
            args.output,
            max_length=recipe.data.max_length,
            hidden_states=source,
            shard_rows=args.shard_rows,
            progress=recipe.logging.progress,
            dtype=args.dtype,
        )
    finally:
        shutdown()


def check_output_folder(path: str, flag: str) -> None:
    """One line for an output folder that cannot be one: empty, a file, under a file, or where
    this process cannot write (probed with a real file: root passes os.access)."""
    import pathlib
    import tempfile

    from draftsmith.train.features import check_cache_folder

    if not str(path).strip():
        raise DraftsmithError(f'{flag} "": name the folder to write into')
    p = pathlib.Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise DraftsmithError(f"{flag} {p} is a file, not a folder: name the feature cache folder")
    folder = p
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise DraftsmithError(f"{flag} {p}: {folder} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise DraftsmithError(
            f"{flag} {p}: cannot write in {folder} ({e.strerror or e}); pick a writable folder"
        ) from None
    check_cache_folder(p, flag)


def _parse_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))  # "" and "2,,5" fail here too
    except ValueError:
        raise DraftsmithError(f"--layers {text!r}: expected comma-separated integers, e.g. 2,5,-1") from None


def _drafter_layers(recipe, target) -> tuple[int, ...]:
    layers = tuple(KINDS[recipe.drafter.kind].task.feature_layers(recipe.drafter, target.config))
    if not layers:
        raise DraftsmithError(
            f"drafter kind {recipe.drafter.kind} does not read target hidden states; nothing to extract"
        )
    return layers


if __name__ == "__main__":
    sys.exit(main())
