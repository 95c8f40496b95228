"""The whole job behind `draftsmith plan`: regeneration, feature extraction and training time, and
their total wall-clock, for the recipe's data on the planned GPUs.

- training: the run's steps (`optim.max_steps`, or `optim.epochs` of the data) x tokens per step
  at the plan's tokens/s, which is the GPUs' peak x a utilisation (UTILISATION_SOURCE says where its
  default comes from);
- feature extraction (a drafter that reads a feature cache: `drafter.features DIR`): one forward of
  the target over one epoch of tokens, at the same peak x utilisation;
- regeneration (`data.source: regenerated` without its file yet): the replies (the scored share of
  an epoch's tokens) decoded by the target served on the same GPUs. Decoding reads every weight once
  per step for `data.regenerate_concurrency` chats at once, so a step takes at least the weights'
  bytes over the memory bandwidth, and the step's tokens at least their FLOPs at peak x utilisation:
  the slower of the two. Prefill is left out (prompts are a small share of the work), so this is
  a lower bound on the time.

No torch at import.
"""

from __future__ import annotations

import pathlib

UTILISATION_SOURCE = (
    "near the model FLOPs utilisation reported for bf16 LLM training on H100s (Llama 3 "
    "pre-training, 38-43%: 'The Llama 3 Herd of Models', 2024, table 4); a drafter's small matmuls may "
    "reach less: time a few steps with scripts/plan_check.py and pass --utilisation"
)
DEFAULT_BANDWIDTH = 3.35e12  # bytes/s: H100 SXM's HBM3 (NVIDIA's datasheet); --gpu-bandwidth for others


def job_times(plan, recipe, built, bandwidth: float = DEFAULT_BANDWIDTH) -> dict:
    """Hours per phase (None where the phase does not run or its size is unknown) and their total."""
    peak = plan.world * plan.gpu_tflops * 1e12 * plan.utilisation
    tokens = plan.epoch_tokens
    # the run's steps: optim.max_steps, or optim.epochs of the data (unknown when its size is)
    training = plan.steps * plan.tokens_per_step / plan.tokens_per_s / 3600 if plan.steps is not None else None
    features = None
    if getattr(recipe.drafter, "features", "online") != "online" and built.feature_layers and tokens:
        features = tokens * built.target_floor / peak / 3600
    regeneration = None
    data = recipe.data
    saved = data.regenerated_path and pathlib.Path(data.regenerated_path).expanduser().is_file()
    if data.source == "regenerated" and not saved and tokens:
        replies = tokens * plan.flops_per_token["scored_fraction"]
        weight_bytes = built.target_params * built.target_bytes
        chats = data.regenerate_concurrency
        step_s = max(weight_bytes / (plan.world * bandwidth), chats * 2 * built.target_params / peak)
        regeneration = replies / (chats / step_s) / 3600
    total = None if training is None else training + (features or 0) + (regeneration or 0)
    return {
        "regeneration_hours": regeneration,
        "feature_extraction_hours": features,
        "training_hours": training,
        "total_hours": total,
        "gpu_bandwidth": bandwidth,
        "regenerate_concurrency": data.regenerate_concurrency,
        "utilisation_source": UTILISATION_SOURCE,
    }


def render_job(plan) -> list[str]:
    j = plan.job
    if not j:
        return []
    lines = [f"  utilisation {plan.utilisation:g}: {j['utilisation_source']}"]
    if j["regeneration_hours"] is not None:
        lines.append(
            f"  regeneration (the target serving the replies on {plan.world} device(s), "
            f"{j['gpu_bandwidth'] / 1e12:g} TB/s each, {j['regenerate_concurrency']} chats in flight: "
            f"data.regenerate_concurrency): ~{j['regeneration_hours']:.2f} h at least"
        )
    if j["feature_extraction_hours"] is not None:
        lines.append(
            f"  feature extraction (one target forward per epoch token): ~{j['feature_extraction_hours']:.2f} h"
        )
    if j["training_hours"] is None:
        lines.append("  training: optim.epochs of a corpus of unknown size (pass --epoch-tokens N)")
        return lines
    lines.append(f"  training ({plan.steps:,} steps x {plan.tokens_per_step:,} tokens): ~{j['training_hours']:.2f} h")
    lines.append(f"  whole job: ~{j['total_hours']:.2f} h wall-clock{_unknown(plan)}")
    return lines


def _unknown(plan) -> str:
    return "" if plan.epoch_tokens else " (without regeneration or feature extraction: corpus size unknown)"
