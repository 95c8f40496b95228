"""A target too big for one GPU: its layers spread over the visible GPUs (a device map).

transformers/accelerate big-model loading places whole decoder layers on GPUs; a forward runs
them one GPU after the other, the activations hopping between GPUs at each boundary. That is a
layer split (pipeline without a pipeline), not tensor parallelism: each layer still runs on one
GPU, so a step costs what one GPU costs for the whole model plus the transfers. It makes a 70B
target *measurable* (acceptance, and its speed relative to its own plain decoding); the speed
such a target serves at is what `draftsmith serve-bench --tensor-parallel-size N` measures.

Where things go:
- the embedding and the LM head on the first GPU of the map. Drafters borrow both (EAGLE,
  DFlash and Medusa with a shared head run F.linear on the head's weight, embed with the
  embedding's) and run on `target.device`, the embedding's device: with the head there too,
  every drafter reads the two on its own GPU and the target's logits arrive where the engine
  compares tokens, at the cost of one hidden-state row copy per forward (last GPU -> first);
- the decoder layers filled in order ("auto": the fewest GPUs, fewest hops) or spread evenly
  ("balanced": transformers' own meaning), each within WEIGHT_SHARE of its GPU's free memory;
- each layer's static KV cache on that layer's GPU: transformers' StaticLayer allocates its
  buffers lazily, on the device of the first keys written to it (infer/cache.py needs nothing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from draftsmith.errors import DraftsmithError

log = logging.getLogger(__name__)

MODES = ("auto", "balanced")
# Of each GPU's free memory, the share the weights may take: the rest holds the KV cache,
# activations and CUDA graphs' pools (transformers keeps the same 10% back on one GPU).
WEIGHT_SHARE = 0.9
CAVEAT = (
    "layer split: the target's layers run one GPU at a time, so its latency is a single-GPU "
    "figure plus the transfers between GPUs, not what tensor-parallel serving gives; "
    "`draftsmith serve-bench --tensor-parallel-size N` measures served speed"
)


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def gpu_free_memory(gpus: list[int] | None = None) -> dict[int, int]:
    """Free bytes per CUDA GPU (`gpus`, default every visible one; {} without CUDA). Asking
    creates a CUDA context on each GPU asked about, so a target that fits asks one."""
    if not torch.cuda.is_available():
        return {}
    gpus = list(range(torch.cuda.device_count())) if gpus is None else gpus
    return {i: int(torch.cuda.mem_get_info(i)[0]) for i in gpus}


def count_weight_bytes(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Bytes of `model`'s parameters in `dtype` (tied tensors once: parameters() yields each once)."""
    return sum(p.numel() for p in model.parameters()) * dtype.itemsize


@dataclass(frozen=True)
class Fit:
    """Where the weights go: "one" GPU (`gpus[0]`) or a "split" over `gpus`, each GPU's weights
    within `budget` bytes (accelerate's max_memory)."""

    kind: str
    gpus: tuple[int, ...]
    budget: dict[int, int]


def choose_fit(
    weights: int, free: dict[int, int], mode: str | None, name: str, dtype: str, gpu: int = 0, split_ok: bool = True
) -> Fit:
    """One GPU or a split, from the weights' bytes and each GPU's free bytes.

    mode None (`--device cuda`): GPU `gpu` if the weights fit it, else a split as "auto" when
    `split_ok` (a named `cuda:N` is not split: it says what would hold the target instead);
    "auto": the same; "balanced": spread over every visible GPU even if one would hold it.
    A target no combination of the GPUs holds is one error naming the numbers."""
    if not free:
        raise DraftsmithError(
            f"--device-map {mode or 'auto'}: spreads the target over CUDA GPUs and none is visible here "
            f"(torch {torch.__version__}{', built without CUDA' if not torch.version.cuda else ''}); "
            "leave --device-map out to run on the CPU"
        )
    budget = {i: int(f * WEIGHT_SHARE) for i, f in sorted(free.items())}
    if mode != "balanced" and weights <= budget.get(gpu, 0):
        return Fit("one", (gpu,), {gpu: budget[gpu]})
    if mode is None and (not split_ok or len(free) == 1) and weights <= free.get(gpu, 0):
        # Tight, with nowhere to split to: loaded whole, as before this check (the cache may not fit).
        return Fit("one", (gpu,), {gpu: free[gpu]})
    if weights > sum(budget.values()):
        raise DraftsmithError(too_big(name, weights, dtype, free))
    if not split_ok:
        raise DraftsmithError(
            f"{name}: its weights take {gb(weights)} in {dtype}, more than cuda:{gpu} holds ({gb(free.get(gpu, 0))} "
            f"free, {WEIGHT_SHARE:.0%} of it for weights); pass --device cuda --device-map auto to spread it over "
            f"the {len(free)} visible GPUs"
        )
    if len(budget) == 1:
        return Fit("one", tuple(budget), budget)
    return Fit("split", tuple(budget), budget)


def too_big(name: str, weights: int, dtype: str, free: dict[int, int]) -> str:
    per_gpu = ", ".join(f"cuda:{i} {gb(f)}" for i, f in sorted(free.items()))
    usable = sum(int(f * WEIGHT_SHARE) for f in free.values())
    return (
        f"{name}: its weights take {gb(weights)} in {dtype}, more than the {len(free)} visible "
        f"{'GPUs hold' if len(free) != 1 else 'GPU holds'}: {gb(sum(free.values()))} free ({per_gpu}), of which "
        f"{WEIGHT_SHARE:.0%} ({gb(usable)}) may hold weights, the rest the KV cache and activations; "
        "use more GPUs (CUDA_VISIBLE_DEVICES), free some, or load a smaller dtype or model"
    )


def _module_name(model: torch.nn.Module, module: torch.nn.Module) -> str:
    return next(n for n, m in model.named_modules() if m is module)


def _device_of(device_map: dict, name: str):
    """The device the map gives module `name`: its own entry, else its nearest listed parent's."""
    while True:
        if name in device_map:
            return device_map[name]
        if not name:
            raise KeyError(name)
        name = name.rpartition(".")[0]


def split_device_map(meta_model: torch.nn.Module, fit: Fit, mode: str | None, name: str, dtype: str) -> dict:
    """accelerate's device map of `meta_model` (built on the meta device) within `fit.budget`,
    the LM head moved to the embedding's GPU (why: the module docstring)."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    no_split = list(getattr(meta_model, "_no_split_modules", None) or [])
    embed, head = meta_model.get_input_embeddings(), meta_model.get_output_embeddings()
    embed_name, head_name = _module_name(meta_model, embed), _module_name(meta_model, head)
    budget = dict(fit.budget)
    tied = head.weight is embed.weight
    if not tied:  # it will sit beside the embedding: keep its room on the first GPU
        first = min(budget)
        budget[first] -= head.weight.numel() * head.weight.dtype.itemsize
    if mode == "balanced":
        budget = get_balanced_memory(meta_model, max_memory=budget, no_split_module_classes=no_split)
    device_map = infer_auto_device_map(meta_model, max_memory=budget, no_split_module_classes=no_split)
    if any(not isinstance(d, int) for d in device_map.values()):  # layers left for "cpu"/"disk": no GPU room
        weights = count_weight_bytes(meta_model, next(meta_model.parameters()).dtype)
        raise DraftsmithError(too_big(name, weights, dtype, {i: int(b / WEIGHT_SHARE) for i, b in fit.budget.items()}))
    device_map[head_name] = _device_of(device_map, embed_name)
    return device_map


def layer_devices(model: torch.nn.Module) -> list[str]:
    """The device of each decoder layer (transformers' `_no_split_modules` classes), in order."""
    kinds = set(getattr(model, "_no_split_modules", None) or ())
    devices = []
    for module in model.modules():
        if type(module).__name__ in kinds:
            param = next(module.parameters(), None)
            if param is not None:
                devices.append(str(param.device))
    return devices


def describe_placement(layers: list[str], embed: str, head: str) -> dict | None:
    """What a report says about a target spread over devices: None on one device, else the
    devices in order, the decoder layers each holds, where the embedding and head are, and
    the speed caveat (CAVEAT)."""
    devices = list(dict.fromkeys([embed, *layers, head]))
    devices = [d for d in devices if d != "meta"]  # a readers-only target's layers are shapes
    if len(devices) <= 1:
        return None
    return {
        "devices": devices,
        "layers_per_device": {d: layers.count(d) for d in devices},
        "embedding": embed,
        "lm_head": head,
        "caveat": CAVEAT,
    }


def placement_of(model: torch.nn.Module) -> dict | None:
    """describe_placement for a loaded model."""
    embed = str(model.get_input_embeddings().weight.device)
    head = str(model.get_output_embeddings().weight.device)
    return describe_placement(layer_devices(model), embed, head)


def plan_device_map(
    name: str, dtype: torch.dtype, device: torch.device, device_map: str | dict | None
) -> tuple[torch.device, str | dict | None]:
    """(the device, the device map) to load `name` with; map None: the whole target on `device`.

    A dict is used as given (the Python API; tests map modules to "cpu"). "auto"/"balanced" go
    over the visible GPUs; with no map, `device` "cuda" (no index) splits a target whose weights
    exceed the GPU's free memory (a named cuda:N or too little memory on all GPUs: one error)."""
    if isinstance(device_map, dict):
        return device, device_map
    if device_map is not None and device_map not in MODES:
        raise DraftsmithError(f"--device-map {device_map!r}: choose one of {', '.join(MODES)}")
    if device_map is not None:
        # No CPU fallback: a map is asked for a target too big for one GPU, which a CPU would
        # decode at a few seconds per token if it held it at all; one line says why instead.
        if not torch.cuda.is_available():
            choose_fit(0, {}, device_map, name, "")  # raises the no-GPU line
        if device.type != "cuda" or device.index is not None:
            raise DraftsmithError(
                f"--device-map {device_map} spreads the target over every visible CUDA GPU and --device {device} "
                "names one device: pass --device cuda or leave --device out (CUDA_VISIBLE_DEVICES picks the GPUs)"
            )
    if device.type != "cuda" or (device_map is None and _meta_build()):
        return device, None
    from .sources import meta_causal_lm

    meta = meta_causal_lm(name, dtype)
    weights = count_weight_bytes(meta, dtype)
    gpu = device.index if device.index is not None else torch.cuda.current_device()
    dtype_name = str(dtype).removeprefix("torch.")
    if device_map is None and weights <= gpu_free_memory([gpu])[gpu] * WEIGHT_SHARE:
        return torch.device("cuda", gpu), None  # the common case: the other GPUs are left alone
    free = gpu_free_memory()
    fit = choose_fit(weights, free, device_map, name, dtype_name, gpu, split_ok=device.index is None)
    if fit.kind == "one":
        return torch.device("cuda", fit.gpus[0]), None
    split = split_device_map(meta, fit, device_map, name, dtype_name)
    log.info(
        "target %s: %s of weights in %s over %d GPUs (%s; free: %s)", name, gb(weights), dtype_name, len(fit.gpus),
        device_map or "too big for one GPU's free memory", ", ".join(f"cuda:{i} {gb(f)}" for i, f in free.items()),
    )  # fmt: skip
    first = min(d for d in split.values() if isinstance(d, int))
    return torch.device("cuda", first), split


def _meta_build() -> bool:
    from . import sources

    return sources._meta_build


def load_split_causal_lm(name_or_path: str, dtype: torch.dtype, device_map: str | dict):
    """`AutoModelForCausalLM` loaded over `device_map` (accelerate dispatches it: each module's
    inputs are moved to its device by a hook, the cache argument excepted), in eval mode."""
    from transformers import AutoModelForCausalLM

    from .sources import hub_errors, require_config, resolve_model

    src = resolve_model(name_or_path)
    if src.builtin is None and src.hub_id is None:  # a local folder
        require_config(src.path)
    with hub_errors(src):
        model = AutoModelForCausalLM.from_pretrained(src.path, dtype=dtype, device_map=device_map)
    return model.eval()
