"""accelerate helpers shared by the trainer, the tasks, the losses and the feature extraction:
the Accelerator for a recipe and its trackers, the frozen target loaded outside DeepSpeed's
`zero.Init`, the module inside a DDP or DeepSpeed wrapper (`unwrap`), a parameter fingerprint,
and a clean process-group shutdown. Its own module, below the pipelines (it imports only the
recipe's config.py), so that train/losses.py and train/features/ (which the EAGLE
tasks import) import neither the tasks nor the trainer above them.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import os
import pathlib

import torch

from draftsmith.errors import DraftsmithError

from .config import Recipe

log = logging.getLogger("draftsmith.train")


# What optim.mixed_precision "auto" becomes for each dtype infer/hardware.py's auto_dtype picks.
_MIXED_FOR_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}


def resolve_mixed_precision(value: str) -> tuple[str, str]:
    """optim.mixed_precision as the Accelerator takes it, and why: "auto" is bf16 autocast where
    the device computes bf16 fast (a CUDA GPU with bf16; a CPU with AMX or AVX512-BF16 whose bf16
    matmul measured faster than fp32's, as the runtime's `--dtype auto` decides, and
    DRAFTSMITH_DTYPE_AUTO overrides), else fp32. On AVX512-BF16 CPUs a bf16 matmul takes
    0.25-0.33x of fp32's time. Decided before the Accelerator exists (it fixes the precision
    when built), from the device it will pick: a GPU unless none is visible or accelerate is
    told to use the CPU."""
    if value != "auto":
        return value, "asked for"
    from draftsmith.infer.hardware import auto_dtype

    cpu = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes")
    device = "cuda" if torch.cuda.is_available() and not cpu else "cpu"
    if device == "cuda" and not torch.cuda.is_bf16_supported():
        return "no", "auto: this GPU has no bf16"
    dtype, why = auto_dtype(device)
    return _MIXED_FOR_DTYPE[dtype], f"auto: {why}"


def make_accelerator(recipe: Recipe):
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs, ProjectConfiguration

    handlers = []
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # How long a collective waits for a silent process (checkpoint.collective_timeout_s).
        # CPU ranks talk over gloo; DeepSpeed would otherwise ask for its own CPU backend.
        kwargs = {"timeout": datetime.timedelta(seconds=recipe.checkpoint.collective_timeout_s)}
        if not torch.cuda.is_available():
            kwargs["backend"] = "gloo"
        group = InitProcessGroupKwargs(**kwargs)
        # accelerate's to_kwargs() drops values equal to its NCCL defaults (a 600 s timeout), which
        # gloo would then replace with its own 1800 s: hand the process group exactly these.
        group.to_kwargs = lambda: dict(kwargs)
        handlers.append(group)
    out = pathlib.Path(recipe.checkpoint.output_dir)
    trackers = list(recipe.logging.trackers)
    if "wandb" in trackers:
        _wandb_offline_unless_logged_in()
    mixed, why = resolve_mixed_precision(recipe.optim.mixed_precision)
    _forget_a_finished_single_process_state(mixed)
    acc = Accelerator(
        mixed_precision=mixed,
        gradient_accumulation_steps=recipe.optim.grad_accum,
        log_with=trackers or None,
        project_config=ProjectConfiguration(project_dir=str(out), logging_dir=str(out / "logs")),
        kwargs_handlers=handlers,
        step_scheduler_with_optimizer=False,  # we step the schedule once per optimizer step
    )
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and acc.distributed_type.name != "FSDP":
        # accelerate quietly falls back to plain data parallel when FSDP has no GPUs to run on.
        raise DraftsmithError(
            "FSDP was requested but accelerate runs FSDP on GPUs only (here: "
            f"{acc.distributed_type.name}); on CPU use configs/accelerate/ddp.yaml, zero2.yaml or zero3.yaml"
        )
    acc.mixed_precision_reason = why  # the run's summary and log record the choice with its reason
    log.info("mixed precision %s (%s)", acc.mixed_precision, why)
    return acc


def _forget_a_finished_single_process_state(mixed: str) -> None:
    """accelerate keeps one AcceleratorState per Python process and refuses a second Accelerator
    with another mixed precision: a notebook or script that trains a bf16 recipe and then an fp32
    one would stop inside accelerate. A single process's state holds nothing a new run needs, so
    it is reset; a launched (distributed) state is the launcher's and stays."""
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DistributedType

    state = AcceleratorState._shared_state
    if not state or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return
    if state.get("distributed_type", DistributedType.NO) != DistributedType.NO:
        return
    if str(state.get("_mixed_precision", mixed)) != mixed:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def _wandb_offline_unless_logged_in() -> None:
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return
    netrc = pathlib.Path("~/.netrc").expanduser()
    if netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return
    os.environ["WANDB_MODE"] = "offline"
    log.info("wandb: no API key found, logging offline (wandb sync later)")


def init_trackers(acc, recipe: Recipe) -> None:
    """Start the recipe's trackers (logging.trackers): the recipe as their flat config, the run
    named after logging.run_name or the output dir."""
    out = pathlib.Path(recipe.checkpoint.output_dir)
    name = recipe.logging.run_name or out.name
    acc.init_trackers(
        recipe.logging.project, config=_flat(recipe.to_dict()), init_kwargs={"wandb": {"name": name, "dir": str(out)}}
    )


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def is_zero3(acc) -> bool:
    plugin = acc.state.deepspeed_plugin
    return plugin is not None and plugin.zero_stage == 3


def load_target(recipe: Recipe, acc, parts: str | None = None, device=None):
    """The frozen target in the dtype training computes in (auto: bf16 on CUDA or under bf16
    mixed precision, else fp32), whole or its feature readers only (`parts`, default the
    recipe's model.target_parts), on the accelerator's device unless `device` says otherwise."""
    from draftsmith.models import Target

    dtype = target_dtype(recipe, acc)
    return Target.load(
        recipe.model.target,
        dtype=dtype,
        device=device or acc.device,
        compile=False,
        parts=parts or recipe.model.target_parts,
    )


def target_dtype(recipe: Recipe, acc) -> str:
    """model.target_dtype, "auto" resolved: bf16 where training computes in bf16 (CUDA, or bf16
    mixed precision: the frozen target's forward is then the step's floor, and a bf16 target
    streams half the bytes without casting its weights every step), else fp32."""
    dtype = recipe.model.target_dtype
    if dtype != "auto":
        return dtype
    return "bfloat16" if acc.device.type == "cuda" or acc.mixed_precision == "bf16" else "float32"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module a DDP or DeepSpeed wrapper holds (its `.module`), or the model itself."""
    return getattr(model, "module", model)


def fingerprint(model) -> str:
    """A short hash of a module's parameters, or of (name, tensor) pairs, names included."""
    named = model.named_parameters() if hasattr(model, "named_parameters") else model
    h = hashlib.sha256()
    for name, p in sorted(named, key=lambda item: item[0]):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def outside_zero_init(acc):
    """Build models as plain tensors even under ZeRO-3. accelerate registers the DeepSpeed config
    with transformers whatever `zero3_init_flag` says, and from_pretrained then partitions every
    model it loads (the target too): unregister it meanwhile, then restore it."""
    plugin = acc.state.deepspeed_plugin
    if plugin is None:
        yield
        return
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        plugin.set_deepspeed_weakref()


def shutdown() -> None:
    # DeepSpeed on gloo hangs at interpreter exit unless the group is destroyed explicitly.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
