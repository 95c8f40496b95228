"""`draftsmith plan RECIPE`: before a run, whether it fits and how long it takes.

The recipe's target and drafter are built on the meta device (shapes, no weights read: a Hub
target resolves through the config.json shipped under configs/<target>/), then:

- parameters: the target's (frozen) and the drafter's (trained);
- memory per GPU for each strategy (DDP, DeepSpeed ZeRO-2, ZeRO-3, FSDP), split into target
  weights, drafter weights, gradients, optimizer state, activations at the recipe's max_length
  and micro-batch, and features; with features from a cache (`drafter.features DIR`, e.g. written
  by vLLM, and `model.target_parts: readers`) the target's side in the trainer is only what reads
  the features (embedding, final norm, LM head);
- training FLOPs per token (train/trainer/flops.py), tokens/s and time per epoch at the GPU's peak
  times a stated utilisation, and the feature cache's size on disk.

The memory model (mixed-precision AdamW as the trainer runs it): drafter weights, gradients and
AdamW's two moments in fp32 (4 + 4 + 8 bytes per trained parameter; ZeRO-2 shards gradients and
optimizer state, ZeRO-3 and FSDP all three); the frozen target whole on every process in its dtype;
activations = micro-batch x max_length x (inputs and outputs of every drafter matmul, times the
unrolled steps) in the compute dtype, plus the vocabulary-wide logits the losses upcast to fp32
(draft and target), plus the target's features of the batch. A strategy fits when its total is at
most 90% of the GPU's memory (the rest: the CUDA context, the allocator's fragmentation).

No torch or transformers at import: the CLI builds its parser without them.
"""

from __future__ import annotations

import math
import pathlib
import re
from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError
from draftsmith.plan_job import DEFAULT_BANDWIDTH, job_times

HEADROOM = 0.9  # of a GPU's memory a plan may fill
ADAM_BYTES = 4 + 4 + 8  # fp32 master weight + fp32 gradient + AdamW's two fp32 moments
STRATEGIES = ("ddp", "zero2", "zero3", "fsdp")
ACCELERATE_CONFIGS = {"ddp": "ddp.yaml", "zero2": "zero2.yaml", "zero3": "zero3.yaml", "fsdp": "fsdp.yaml"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Tokens in one epoch of the built-in corpora (chat template applied; packed rows use them all): sharegpt
# measured with SmolLM2's tokenizer on 1,500 of its 17,390 usable conversations (mean 1,470 tokens;
# Llama's and Qwen's larger vocabularies give some 10-20% fewer); chitchat: its 7,168 conversations, ~3.0M tokens.
CORPUS_TOKENS = {"sharegpt": 25.6e6, "chitchat": 3.0e6}
DEFAULT_SCORED = 0.5  # share of a row's tokens the loss scores (the replies): the LM heads run there only


@dataclass
class Memory:
    """Bytes per GPU under one strategy."""

    strategy: str
    target_weights: float
    drafter_weights: float
    gradients: float
    optimizer: float
    activations: float
    features: float
    total: float = 0.0
    fits: bool = False

    def __post_init__(self):
        self.total = sum(getattr(self, f) for f in ("target_weights", "drafter_weights", "gradients", "optimizer"))
        self.total += self.activations + self.features


@dataclass
class Plan:
    recipe: str
    target: str
    kind: str
    world: int
    gpu_memory: float
    target_params: int
    target_side_params: (
        int  # what the trainer holds of the target: all of it, or the feature readers (model.target_parts readers)
    )
    drafter_params: int
    features: str
    max_length: int
    batch_size: int
    tokens_per_step: int
    memory: list[Memory] = field(default_factory=list)
    flops_per_token: dict = field(default_factory=dict)
    gpu_tflops: float = 0.0
    utilisation: float = 0.0
    tokens_per_s: float = 0.0
    epoch_tokens: float | None = None
    epoch_hours: float | None = None
    feature_cache_bytes: float | None = None
    steps: int | None = None  # optimizer steps the run takes (optim.max_steps, or from optim.epochs)
    epochs: float | None = None  # passes over the data those steps make (None: corpus size unknown)
    job: dict = field(default_factory=dict)  # hours per phase and in all (draftsmith/plan_job.py)
    advice: str = ""

    @property
    def fitting(self) -> list[str]:
        return [m.strategy for m in self.memory if m.fits]

    def summary(self) -> str:
        """The one line `draftsmith train` prints before it starts."""
        best = min(self.memory, key=lambda m: m.total)
        fit = (
            f"fits with {', '.join(self.fitting)} ({_gb(min(m.total for m in self.memory if m.fits))} "
            f"of {_gb(self.gpu_memory)} per GPU)"
            if self.fitting
            else f"does not fit ({best.strategy}: {_gb(best.total)} > {_gb(self.gpu_memory * HEADROOM)} per GPU)"
        )
        epoch = f"; epoch ~{self.epoch_hours:.1f} h" if self.epoch_hours is not None else ""
        if self.steps is not None and self.epochs is not None:
            epoch += f"; {self.steps:,} steps = {self.epochs:.1f} epochs"
        if self.job and self.job["total_hours"] is not None:
            epoch += f"; whole job ~{self.job['total_hours']:.1f} h"
        if self.feature_cache_bytes and self.features != "online":
            epoch += f"; feature cache {_gb(self.feature_cache_bytes)}"
        return (
            f"plan: {self.target} {_count_str(self.target_params)} frozen + {self.kind} "
            f"{_count_str(self.drafter_params)} trained; {fit}; ~{self.tokens_per_s:,.0f} tokens/s on {self.world} "
            f"device(s) at {self.gpu_tflops:g} TFLOP/s x {self.utilisation:g}{epoch}"
        )


# --- building the plan ---------------------------------------------------------------------------


def make_plan(recipe, *, recipe_path: str = "", gpus: int = 8, nodes: int = 1, gpu_memory: float = 80e9,
              gpu_tflops: float = 989.0, utilisation: float = 0.4, scored: float = DEFAULT_SCORED,
              epoch_tokens: float | None = None, device: str = "cuda", bandwidth: float = DEFAULT_BANDWIDTH,
              regen_replicas: int = 1, regen_tp: int | None = None,
              regen_concurrency: int | None = None) -> Plan:  # fmt: skip
    """The plan of a loaded recipe (train/config.py's Recipe); builds on the meta device. regen_*:
    the server that regenerates the replies (draftsmith/plan_regen.py; default the page's)."""
    built = build_meta(recipe, device, scored)
    world = gpus * nodes
    T, b = recipe.data.max_length, recipe.optim.batch_size
    plan = _plan(recipe, built, recipe_path, world, gpu_memory, gpu_tflops, utilisation, scored, epoch_tokens, T, b)
    server = {"gpus": gpus, "replicas": regen_replicas, "tp": regen_tp, "concurrency": regen_concurrency}
    plan.job = job_times(plan, recipe, built, bandwidth, server)
    return plan


@dataclass
class Built:
    """What the meta-device build tells a plan."""

    target_params: int
    reader_params: int  # embedding + final norm + LM head: the target a feature cache leaves to the trainer
    drafter_params: int
    target_bytes: int  # per parameter
    act_bytes: int  # per activation element (the compute dtype)
    hidden_size: int
    vocab_size: int
    feature_layers: int  # target layers the drafter reads (0: none, a draft LM reads logits)
    reads_logits: bool
    target_cost: object  # train/trainer/flops.py ModuleCost per token at the recipe's T
    draft_cost: object
    target_floor: float  # the target's forward-only FLOPs per token (LM head on every row)


def planned_mixed_precision(recipe, device: str) -> str:
    """optim.mixed_precision as the trainer resolves it on `device`: "auto" is bf16 on a GPU and,
    on a CPU, this machine's choice (infer/hardware.py's auto_dtype: AMX/AVX512-BF16, measured)."""
    mixed = recipe.optim.mixed_precision
    if mixed != "auto":
        return mixed
    if device == "cuda":
        return "bf16"
    from draftsmith.infer.hardware import auto_dtype

    return "bf16" if auto_dtype("cpu")[0] == "bfloat16" else "no"


def build_meta(recipe, device: str = "cuda", scored: float = DEFAULT_SCORED) -> Built:
    """Target and drafter on the meta device, through the kind's own training task."""
    import torch

    from draftsmith.kinds import KINDS
    from draftsmith.models.sources import load_config, load_tokenizer, meta_build, meta_causal_lm, resolve_model
    from draftsmith.train.trainer.flops import module_cost

    name = recipe.model.target
    mixed = planned_mixed_precision(recipe, device)
    dtype_name = recipe.model.target_dtype
    if dtype_name == "auto":  # as the trainer resolves it (train/distributed.py, target_dtype)
        dtype_name = "bfloat16" if device == "cuda" or mixed == "bf16" else "float32"
    dtype = getattr(torch, dtype_name)
    folder = pathlib.Path(name).expanduser()
    if folder.is_dir() and not (folder / "config.json").is_file():  # else transformers' traceback
        raise DraftsmithError(f"model.target {name}: the folder has no config.json; name a transformers model folder")
    target_model = meta_causal_lm(name, dtype)
    # Built-in targets and local folders carry their tokenizer (a kind may read its special ids);
    # a Hub id has none offline, and none is needed for shapes.
    src = resolve_model(name) if name not in _known() else None
    tokenizer = load_tokenizer(name) if src is not None and (src.builtin or src.hub_id is None) else None
    target = MetaTarget(target_model, tokenizer, name, dtype)
    with meta_build(), torch.device("meta"):
        task = KINDS[recipe.drafter.kind].task(recipe.drafter, target, seed=recipe.optim.seed)
    trained = _count(task.trainable_parameters())
    layers = task.layers
    steps, draft_scored = task.draft_passes(recipe.data.max_length, scored)  # DFlash: its anchors' blocks
    T = recipe.data.max_length
    drafter = task.model
    vocabs = tuple({target.vocab_size, getattr(getattr(drafter, "config", None), "draft_vocab_size", 0)} - {0})
    config = load_config(name)
    reader = target_model.get_input_embeddings().weight.numel() + _numel(getattr(target_model.model, "norm", None))
    head = target_model.get_output_embeddings()
    if head is not None and head.weight is not target_model.get_input_embeddings().weight:
        reader += head.weight.numel()
    act_bytes = 2 if mixed in ("bf16", "fp16") else 4
    t_cost = module_cost(target_model, T, scored, 1, (target.vocab_size,))
    floor = module_cost(target_model, T, 1.0, 1, (target.vocab_size,)).flops
    return Built(
        target_params=sum(p.numel() for p in target_model.parameters()),
        reader_params=reader,
        drafter_params=trained,
        target_bytes=DTYPE_BYTES[dtype_name],
        act_bytes=act_bytes,
        hidden_size=config.hidden_size,
        vocab_size=target.vocab_size,
        feature_layers=len(layers),
        reads_logits=True,
        target_cost=t_cost,
        draft_cost=module_cost(drafter, T, draft_scored, steps, vocabs),
        target_floor=floor,
    )


@dataclass
class MetaTarget:
    """The surface a training task reads from `models.Target`, over a meta-device model."""

    model: object
    tokenizer: object
    name: str
    dtype: object

    def __post_init__(self):
        self.config = self.model.config
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        eos = getattr(self.config, "eos_token_id", None)
        self.eos_token_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.device = self.model.get_output_embeddings().weight.device


def _known() -> dict:
    from draftsmith.models.sources import KNOWN_CONFIGS

    return KNOWN_CONFIGS


def _count(params) -> int:
    total = 0
    for p in params:
        if isinstance(p, dict):  # an AdamW parameter group
            total += _count(p["params"])
        else:
            total += p.numel()
    return total


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def offline(recipe) -> bool:
    """The drafter reads its features from a cache: no target forward in training."""
    return getattr(recipe.drafter, "features", "online") != "online"


def readers_only(recipe) -> bool:
    """The trainer holds only the target's embedding, final norm and LM head (models/readers.py)."""
    return offline(recipe) and recipe.model.target_parts == "readers"


def memory(built: Built, strategy: str, world: int, T: int, b: int, readers: bool) -> Memory:
    """Bytes per GPU of one strategy (the model in this module's docstring)."""
    n, P = built.drafter_params, world
    shard_grads = strategy in ("zero2", "zero3", "fsdp")
    shard_weights = strategy in ("zero3", "fsdp")
    tokens = b * T
    # The draft's logits the losses upcast to fp32: kept for backward at every step, the fp32
    # log-softmax and the target probabilities it is weighted by; alive only while one head at one
    # step is scored, its fp32 logits and its gathered rows of the target's law (measured: leaving
    # these out put the plan 20-23% under a CPU run's peak). Then the target's logits (+ fp32 copy).
    draft_logits = built.draft_cost.vocab_outputs * 4 * 2 + built.draft_cost.vocab_unit * 4 * 2
    target_logits = built.vocab_size * (built.target_bytes + 4) if built.reads_logits else 0
    features = tokens * built.feature_layers * built.hidden_size * built.target_bytes
    return Memory(
        strategy=strategy,
        target_weights=(built.reader_params if readers else built.target_params) * built.target_bytes,
        drafter_weights=n * 4 / (P if shard_weights else 1),
        gradients=n * 4 / (P if shard_grads else 1),
        optimizer=n * 8 / (P if shard_grads else 1),
        activations=tokens * (built.draft_cost.activations * built.act_bytes + draft_logits + target_logits),
        features=features,
    )


def _plan(recipe, built, recipe_path, world, gpu_memory, gpu_tflops, utilisation, scored, epoch_tokens, T, b) -> Plan:
    readers = readers_only(recipe)
    mems = [memory(built, s, world, T, b, readers) for s in STRATEGIES]
    for m in mems:
        m.fits = m.total <= gpu_memory * HEADROOM
    cached = offline(recipe)
    target_train = (built.vocab_size * built.hidden_size * 2 * scored) if cached else built.target_cost.flops
    train_flops = target_train + 3 * built.draft_cost.flops
    rate = world * gpu_tflops * 1e12 * utilisation / train_flops
    tokens = epoch_tokens if epoch_tokens is not None else _epoch_tokens(recipe.data)
    plan = Plan(
        recipe=recipe_path,
        target=recipe.model.target,
        kind=recipe.drafter.kind,
        world=world,
        gpu_memory=gpu_memory,
        target_params=built.target_params,
        target_side_params=built.reader_params if readers else built.target_params,
        drafter_params=built.drafter_params,
        features=getattr(recipe.drafter, "features", "online"),
        max_length=T,
        batch_size=b,
        tokens_per_step=b * T * world * recipe.optim.grad_accum,
        memory=mems,
        flops_per_token={
            "target_forward_floor": built.target_floor,
            "target_in_training": target_train,
            "draft_forward": built.draft_cost.flops,
            "training": train_flops,
            "scored_fraction": scored,
        },
        gpu_tflops=gpu_tflops,
        utilisation=utilisation,
        tokens_per_s=rate,
        epoch_tokens=tokens,
        epoch_hours=tokens / rate / 3600 if tokens else None,
        feature_cache_bytes=(tokens * built.feature_layers * built.hidden_size * 2)
        if tokens and built.feature_layers
        else None,
    )
    plan.steps, plan.epochs = run_steps(recipe.optim, tokens, plan.tokens_per_step)
    plan._built = built  # for advice on a chosen strategy (not a dataclass field: not in --json)
    if not plan.fitting:
        plan.advice = smallest_change(recipe, built, world, gpu_memory, T, b)
    return plan


def run_steps(optim, epoch_tokens: float | None, tokens_per_step: int) -> tuple[int | None, float | None]:
    """(optimizer steps, epochs they cover): optim.epochs of the data's tokens (capped by
    optim.max_steps when both are set; the trainer counts the same from its rows), else
    optim.max_steps. Unknown (None) where the size of the data is needed and not known."""
    steps = optim.max_steps
    if optim.epochs is not None and epoch_tokens:
        from_epochs = max(1, math.ceil(optim.epochs * epoch_tokens / tokens_per_step))
        steps = from_epochs if steps is None else min(steps, from_epochs)
    epochs = steps * tokens_per_step / epoch_tokens if steps is not None and epoch_tokens else None
    return steps, epochs


def _epoch_tokens(data) -> float | None:
    """Tokens in one epoch: max_rows full rows when the recipe caps them (packing fills each),
    else the built-in corpus's count (None for other data: --epoch-tokens says it)."""
    if data.max_rows:
        return float(data.max_rows * data.max_length)
    return CORPUS_TOKENS.get(data.path)


def smallest_change(recipe, built, world, gpu_memory, T, b, strategy: str | None = None) -> str:
    """One line naming the smallest change that fits: another strategy, fewer tokens per
    micro-batch (the same tokens per step through gradient accumulation), features from vLLM."""
    limit = gpu_memory * HEADROOM
    readers_now = readers_only(recipe)  # what the fits below hold of the target: readers, or all of it

    def fits(strategy, T_, b_, readers_):
        return memory(built, strategy, world, T_, b_, readers_).total <= limit

    accel = "accelerate launch --config_file configs/accelerate/{} ..."
    for s in STRATEGIES:
        if s != strategy and fits(s, T, b, readers_now):
            return f"use {s} ({accel.format(ACCELERATE_CONFIGS[s])})"
    for s in STRATEGIES:
        bb = b
        while bb > 1:
            bb //= 2
            if fits(s, T, bb, readers_now):
                accum = recipe.optim.grad_accum * b // bb
                return f"use {s} with --optim.batch_size={bb} --optim.grad_accum={accum} (the same tokens per step)" + (
                    "" if s == "ddp" else f" ({accel.format(ACCELERATE_CONFIGS[s])})"
                )
    if not readers_now and built.feature_layers:  # the drafter reads target features: a cache can hold them
        readers = "--model.target_parts=readers --logging.eval_every=0 --logging.acceptance_prompts=0"
        for s in STRATEGIES:
            if fits(s, T, b, True):
                if recipe.drafter.features != "online":  # the cache is there: hold only its readers
                    return f"load only the target's embedding, final norm and LM head: {readers} (with {s})"
                return (
                    f"take the target's features from vLLM: draftsmith features {recipe_name(recipe)} --engine vllm "
                    f"--output-dir feats/, then --drafter.features=feats/ {readers} (with {s})"
                )
    for s in STRATEGIES:
        TT = T
        while TT > 256:
            TT //= 2
            if fits(s, TT, 1, readers_now):
                return f"use {s} with --optim.batch_size=1 --data.max_length={TT}"
    return "nothing in reach fits: a GPU with more memory, or a smaller drafter"


def recipe_name(recipe) -> str:
    return getattr(recipe, "_path", "RECIPE")


# --- sizes -----------------------------------------------------------------------------------------


def parse_bytes(text: str) -> float:
    """'80GB', '141gb', '16GiB', '80' (GB) -> bytes; anything else, or a size of 0, is refused."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgt]i?b?)?\s*", str(text).lower())
    if not m or float(m.group(1)) == 0:
        raise DraftsmithError(f"--gpu-memory {text!r}: expected a size like 80GB or 141GB")
    unit = (m.group(2) or "gb").rstrip("b")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    return float(m.group(1)) * scale[unit]


def _count_str(n: int) -> str:
    return next(
        f"{n / div:.{d}f}{unit}" for div, unit, d in ((1e9, "B", 2), (1e6, "M", 1), (1, "", 0)) if n >= div or div == 1
    )


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 or n == 0 else f"{n / 1e6:.0f} MB"


__all__ = ["Plan", "build_meta", "make_plan", "memory", "parse_bytes"]
