"""The whole job behind `draftsmith plan`: regeneration, feature extraction and training time, and
their total wall-clock, for the recipe's data on the planned GPUs.

- training: the run's steps (`optim.max_steps`, or `optim.epochs` of the data) x tokens per step
  at the plan's tokens/s, which is the GPUs' peak x a utilisation (UTILISATION_SOURCE says where its
  default comes from);
- feature extraction (a drafter that reads a feature cache: `drafter.features DIR`): one forward of
  the target over one epoch of tokens, at the same peak x utilisation;
- regeneration (`data.source: regenerated` without its file yet): the replies (the scored share of
  an epoch's tokens) decoded by the target on the server the page starts, or the layout the
  `--regen-*` flags give (replicas, tensor-parallel size, requests in flight per replica):
  draftsmith/plan_regen.py.

No torch at import.
"""

from __future__ import annotations

import pathlib

from draftsmith import plan_regen

UTILISATION_SOURCE = (
    "near the model FLOPs utilisation reported for bf16 LLM training on H100s (Llama 3 "
    "pre-training, 38-43%: 'The Llama 3 Herd of Models', 2024, table 4); a drafter's small matmuls may "
    "reach less: time a few steps with scripts/plan_check.py and pass --utilisation"
)
DEFAULT_BANDWIDTH = 3.35e12  # bytes/s: H100 SXM's HBM3 (NVIDIA's datasheet); --gpu-bandwidth for others


def job_times(plan, recipe, built, bandwidth: float = DEFAULT_BANDWIDTH, server: dict | None = None) -> dict:
    """Hours per phase (None where the phase does not run or its size is unknown) and their total.
    `server`: the regeneration server's layout (plan_regen.layout's keywords: replicas, tp,
    concurrency, gpus per node); default the page's."""
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
        server = dict(server or {})
        weight_bytes = built.target_params * built.target_bytes
        lay = plan_regen.layout(
            weight_bytes, plan.gpu_memory, server.pop("gpus", plan.world), plan.world, data.regenerate_concurrency,
            **server,
        )  # fmt: skip
        per_gpu = plan.gpu_tflops * 1e12 * plan.utilisation
        replies = tokens * plan.flops_per_token["scored_fraction"]
        regeneration = plan_regen.estimate(
            recipe, lay, replies, built.target_params, weight_bytes, bandwidth, per_gpu, plan.recipe
        )
    hours = regeneration["hours"] if regeneration else None
    total = None if training is None else training + (features or 0) + (hours or 0)
    return {
        "regeneration_hours": hours,
        "regeneration": regeneration,  # the server's layout, its tokens/s and the lines that start it
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
    if j["regeneration"] is not None:
        lines += plan_regen.render(j["regeneration"], j["gpu_bandwidth"])
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
