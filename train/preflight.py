"""What a training run needs that can be checked before any model loads: the data file, the
regenerated chats a recipe reads (`data.source: regenerated` through a server), the feature cache a
drafter trains from. A run that would stop in the data builder or the feature reader stops here,
in a second, instead of after the target has loaded on every GPU. Also a recipe that asks for what
the launch cannot give: τ during training under DeepSpeed ZeRO-3 (the drafter is sharded there),
whether the launch's accelerate config names stage 3 or the DeepSpeed config file it hands over does."""

from __future__ import annotations

import os
import pathlib

from draftsmith.errors import DraftsmithError

from .data.loading import LOCAL_SUFFIXES


def regenerate_first(recipe_path: str, saved) -> str:
    """The one line for a recipe whose regenerated chats are neither on disk nor reachable."""
    return (
        f"data.regenerated_path {saved} does not exist: regenerate first (serve the target, e.g. vllm serve "
        f"MODEL --port 8000), then draftsmith train {recipe_path or 'RECIPE'} --data-only "
        "--data.regenerate_endpoint http://127.0.0.1:8000/v1 [--data.regenerate_model=NAME]"
    )


def check_before_loading(recipe, recipe_path: str = "") -> None:
    """One DraftsmithError for the first missing input; nothing is loaded or written."""
    d = recipe.data
    local = pathlib.Path(d.path).expanduser()
    if LOCAL_SUFFIXES.get(local.suffix.lower()) and not local.is_file():
        raise DraftsmithError(f"data file not found: {d.path} (data.path)")
    saved = pathlib.Path(d.regenerated_path).expanduser() if d.regenerated_path else None
    if saved is not None and saved.is_dir():
        raise DraftsmithError(
            f"data.regenerated_path {saved} is a folder: name a file, e.g. {saved / 'regenerated.jsonl'}"
        )
    endpoint_ready = bool(d.regenerate_endpoint and d.regenerate_model)
    if d.regenerate and d.regenerate_with == "endpoint" and not endpoint_ready and not (saved and saved.is_file()):
        raise DraftsmithError(regenerate_first(recipe_path, saved))
    features = getattr(recipe.drafter, "features", "online")
    if features != "online" and not (pathlib.Path(features).expanduser() / "manifest.json").is_file():
        raise DraftsmithError(
            f"drafter.features {features}: no feature cache there (no manifest.json): write it first with "
            f"draftsmith features {recipe_path or 'RECIPE'} --output-dir {features}, or train with "
            "--drafter.features=online"
        )
    if launch_zero_stage() == 3 and acceptance_during_training(recipe):
        raise DraftsmithError(zero3_acceptance_refusal(recipe))


def acceptance_during_training(recipe) -> bool:
    """The recipe measures τ during training (what best/ follows), not only at the end."""
    return recipe.logging.acceptance_every > 0 and recipe.logging.acceptance_prompts > 0


def zero3_acceptance_refusal(recipe) -> str:
    """The one line for τ during training under ZeRO-3, wherever the launch is found to be ZeRO-3."""
    return (
        f"logging.acceptance_every {recipe.logging.acceptance_every} under DeepSpeed ZeRO-3: the drafter is sharded, "
        "so τ is not measured during training and best/ could not follow it; add --logging.acceptance_every=0 "
        "(best/ is then final/; measure it with draftsmith eval) or launch with zero2.yaml or ddp.yaml"
    )


def launch_zero_stage() -> int | None:
    """The DeepSpeed ZeRO stage `accelerate launch` set this process up for, read as accelerate
    will read it (None: no DeepSpeed, or a stage it does not say): a DeepSpeed config file's
    zero_optimization.stage (an accelerate config's deepspeed_config_file, or
    --deepspeed_config_file: ACCELERATE_DEEPSPEED_CONFIG_FILE) where it names one, else
    ACCELERATE_DEEPSPEED_ZERO_STAGE (an accelerate config's zero_stage, e.g. zero3.yaml)."""
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    config = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if config and config != "none":
        found = (_deepspeed_config(config).get("zero_optimization") or {}).get("stage")
        if isinstance(found, int) or (isinstance(found, str) and found.isdigit()):
            return int(found)
        stage = stage or "2"  # "auto" or none: accelerate's default
    return int(stage) if stage and stage.isdigit() else None


def _deepspeed_config(config: str) -> dict:
    """A DeepSpeed config as accelerate takes it: a JSON file's path or the JSON itself; {} where
    it is neither (accelerate reports that itself)."""
    import json

    try:
        path = pathlib.Path(config).expanduser()
        found = json.loads(path.read_text() if path.is_file() else config)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
