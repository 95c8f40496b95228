"""The `draftsmith` command: train, features, plan, bench, eval, generate, export, publish, crosscheck, serve-bench.

Every user-facing error is a DraftsmithError, printed as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from draftsmith.errors import run_command
from draftsmith.kinds import resolve


@dataclass(frozen=True)
class Command:
    """One subcommand: its line in `draftsmith --help` and the module that declares it.

    arguments, run: lazy "module:function" references (as draftsmith/kinds.py's): `arguments(parser)`
    declares the options when the parser is built, so the modules named here load nothing heavy at
    import (torch loads inside `run`); `run(args)` runs the command and returns its exit status
    (None: 0).
    recipe: the command reads a YAML recipe and takes the recipe-override tail (`--section.key=value`
    or `--section.key value`, any number): the tokens no option claims reach `run` as
    `args.overrides`, and the recipe loader (train/config.py) refuses an unknown key with a "did you
    mean". Any other command refuses a token it does not know, as argparse does.
    """

    help: str | Callable[[], str]  # a function: the line names what only its module knows
    arguments: str
    run: str
    recipe: bool = False


def _export_help() -> str:
    from draftsmith.shipping.export import FORMATS  # light: torch loads when an export runs

    return f"write a checkpoint in the layout an engine loads ({', '.join(FORMATS)})"


# The commands, in --help's order. Each layer declares its own: training in train/, the decoding
# commands beside the benchmark (draftsmith/evaluation/commands.py), shipping in draftsmith/shipping/.
COMMANDS: dict[str, Command] = {
    "train": Command(
        "train a drafter from a YAML recipe (draftsmith train RECIPE --help)",
        "draftsmith.train.__main__:add_arguments",
        "draftsmith.train.__main__:run",
        recipe=True,
    ),
    "features": Command(
        "extract the target's hidden states into an offline feature cache, through transformers or vLLM "
        "(draftsmith features RECIPE --help)",
        "draftsmith.train.cli_options:features_arguments",
        "draftsmith.cli:run_features",
        recipe=True,
    ),
    "bench": Command(
        "speed and acceptance vs plain decoding and transformers",
        "draftsmith.evaluation.commands:bench_arguments",
        "draftsmith.evaluation.commands:cmd_bench",
    ),
    "eval": Command(
        "acceptance metrics only",
        "draftsmith.evaluation.commands:eval_arguments",
        "draftsmith.evaluation.commands:cmd_eval",
    ),
    "generate": Command(
        "decode one prompt, optionally showing drafted tokens",
        "draftsmith.evaluation.commands:generate_arguments",
        "draftsmith.evaluation.commands:cmd_generate",
    ),
    "export": Command(_export_help, "draftsmith.shipping.export:add_arguments", "draftsmith.shipping.export:run"),
    "publish": Command(
        "upload a checkpoint, its engine exports and a model card to the Hub",
        "draftsmith.shipping.hub:add_arguments",
        "draftsmith.shipping.hub:run",
    ),
    "plan": Command(
        "before a run: what fits on which GPUs and how long it takes",
        "draftsmith.plan_cli:add_arguments",
        "draftsmith.plan_cli:run",
        recipe=True,
    ),
    "crosscheck": Command(
        "decode the same prompts in vLLM / llama.cpp and our runtime: outputs, acceptance and speed side by side",
        "draftsmith.shipping.crosscheck_cli:add_arguments",
        "draftsmith.shipping.sampled:run",
    ),
    "serve-bench": Command(
        "vLLM's server with and without the drafter at 1 to 64 requests in flight",
        "draftsmith.shipping.serve_bench:add_arguments",
        "draftsmith.shipping.serve_bench:run",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The one parser tree: every command is a subparser declared by its module."""
    parser = argparse.ArgumentParser(prog="draftsmith", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        text = command.help() if callable(command.help) else command.help
        resolve(command.arguments)(sub.add_parser(name, help=text))
    return parser


def run_features(args) -> int:
    """`draftsmith features`: train/features/cli.py's command, with the engines this layer hands down
    (the training layer does not import draftsmith.shipping): the extractor starts the vLLM that
    --vllm names (draftsmith/shipping/installs.py: resolve_vllm), when it starts."""
    import functools

    from draftsmith.shipping.engines.vllm_extract import VLLMFeatureExtractor
    from draftsmith.train.features.cli import run

    return run(args, engines={"vllm": functools.partial(VLLMFeatureExtractor, vllm=getattr(args, "vllm", None))})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    command = COMMANDS[args.command]
    if command.recipe:
        args.overrides = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_command(resolve(command.run), args)


if __name__ == "__main__":
    sys.exit(main())
