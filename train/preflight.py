"""What a training run needs that can be checked before any model loads: the data file, the
regenerated chats a recipe reads (`data.source: regenerated` through a server), the feature cache a
drafter trains from. A run that would stop in the data builder or the feature reader stops here,
in a second, instead of after the target has loaded on every GPU. Also a recipe that asks for what
the launch cannot give: τ during training under DeepSpeed ZeRO-3 (the drafter is sharded there)."""

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
    zero3 = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3"  # what accelerate launch sets for zero3.yaml
    log = recipe.logging
    if zero3 and log.acceptance_every > 0 and log.acceptance_prompts > 0:
        raise DraftsmithError(
            f"logging.acceptance_every {log.acceptance_every} under DeepSpeed ZeRO-3: the drafter is sharded, so "
            "τ is not measured during training and best/ could not follow it; add --logging.acceptance_every=0 "
            "(best/ is then final/; measure it with draftsmith eval) or launch with zero2.yaml or ddp.yaml"
        )
