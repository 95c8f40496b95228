"""Training recipes: typed dataclasses, YAML instances, dotted command-line overrides.

A recipe (`configs/<target>/<drafter>.yaml`) is one `Recipe`: six sections, each a dataclass.
Loading is strict: an unknown or mistyped key, a wrong type or a bad value is a DraftsmithError
that names the key (with a "did you mean" when one is close), before any model loads.

    recipe = load_recipe("configs/tiny/draft_lm.yaml", ["--optim.lr=3e-4", "--data.max_length", "256"])

The `drafter` section is polymorphic: its `kind` picks the dataclass from `DRAFTER_CONFIGS`
(one entry per trainable drafter kind), so each drafter declares exactly the knobs it has.
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
import types
import typing
from dataclasses import dataclass, field

import yaml

from draftsmith.errors import DraftsmithError


@dataclass
class ModelConfig:
    target: str = "smollm2-135m-instruct"  # built-in name, folder, .gguf or Hub id; frozen, never saved
    target_dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU (this CPU has no fast bf16)


@dataclass
class LoraConfig:
    r: int = 0  # 0: full fine-tuning; > 0: LoRA adapters via peft (Hu et al. 2021)
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    merge: bool = True  # merge adapters into the weights when saving: checkpoints load as plain LMs


@dataclass
class DraftLMConfig:
    """An independent draft LM distilled from the target (DistillSpec, Zhou et al. 2023)."""

    kind: str = "draft_lm"
    init: str = "truncated:8"  # truncated:N (target's first N layers) or any causal LM with its tokenizer
    lora: LoraConfig = field(default_factory=LoraConfig)
    loss: str = "fkl"  # fkl | rkl | jsd | tvd | ce (see train/losses.py)
    temperature: float = 1.0
    jsd_beta: float = 0.5
    on_policy_fraction: float = 0.0  # share of steps trained on the draft's own samples
    on_policy_tokens: int = 32  # tokens the draft samples per on-policy sequence
    on_policy_temperature: float = 1.0


@dataclass
class MedusaTrainConfig:
    """Medusa heads on the target's last hidden state (Cai et al. 2024): Medusa-1 trains the heads
    on a frozen target; Medusa-2 trains them jointly with the target through LoRA."""

    kind: str = "medusa"
    num_heads: int = 4  # K: head k predicts the token k+1 places after the target's own next token
    num_layers: int = 1  # ResBlocks per head
    share_lm_head: bool = False  # heads use the target's LM head itself (fewer weights, untrained)
    decay: float = 0.8  # λ: head k's loss weight is λ^k
    labels: str = "tokens"  # tokens: CE on the data's tokens; distill: CE on the target's distribution
    mode: str = "medusa1"  # medusa1 | medusa2
    heads_loss_weight: float = 0.2  # medusa2: L = L_LM + heads_loss_weight * Σ_k λ^k L_k
    heads_lr_multiplier: float = 4.0  # medusa2: the heads learn at optim.lr * this, LoRA at optim.lr
    lm_loss: str = "ce"  # medusa2: ce on the data's tokens | kl to the original target (self-distillation)
    lora: LoraConfig = field(default_factory=lambda: LoraConfig(r=16))  # medusa2 only
    init: str | None = None  # an existing medusa checkpoint folder to start the heads from


@dataclass
class EagleTrainConfig:
    """EAGLE-1 (Li et al. 2024): one decoder layer predicting the target's next feature (its last
    hidden state after the final norm) from [embedding of the next token; feature]."""

    kind: str = "eagle"
    features: str = "online"  # online | a feature cache folder (python -m draftsmith.train.features)
    noise: float = 0.1  # uniform noise U(-noise, noise) on the input features (paper, sec. 4.2)
    feature_loss_weight: float = 1.0  # smooth-L1 on the predicted feature
    cls_loss_weight: float = 0.1  # cross-entropy to the target's distribution (paper: 0.1)
    intermediate_size: int | None = None  # the draft layer's MLP width (None: the target's)
    init: str | None = None  # an existing eagle checkpoint folder to start from


@dataclass
class Eagle3TrainConfig:
    """EAGLE-3 (Li et al. 2025): fused low/mid/high target features, training-time test over
    `ttt_steps` unrolled steps, a reduced draft vocabulary (d2t/t2d)."""

    kind: str = "eagle3"
    features: str = "online"  # online | a feature cache folder (python -m draftsmith.train.features)
    aux_layers: list[int] | None = None  # indices into the target's hidden_states; None: [2, L//2, L-3]
    draft_vocab_size: int = 32000  # most frequent target tokens in the training data (capped at the target's vocab)
    ttt_steps: int = 7  # n: steps unrolled on the draft's own hidden states
    ttt_decay: float = 0.8  # step j's loss weight is ttt_decay^j
    noise: float = 0.0  # uniform noise on the input features
    intermediate_size: int | None = None  # the draft layer's MLP width (None: the target's)
    init: str | None = None  # an existing eagle3 checkpoint folder to start from


# One entry per trainable drafter kind.
DRAFTER_CONFIGS: dict[str, type] = {"draft_lm": DraftLMConfig, "medusa": MedusaTrainConfig,
                                    "eagle": EagleTrainConfig, "eagle3": Eagle3TrainConfig}


@dataclass
class DataConfig:
    path: str = "chitchat"  # chitchat | stdlib | a datasets hub id | a local .json/.jsonl/.parquet
    name: str | None = None  # datasets config name
    split: str = "train"
    format: str = "auto"  # auto | chat | text
    messages_column: str = "messages"
    text_column: str = "text"
    max_length: int = 512  # tokens per training row
    pack: bool = True  # concatenate rows (EOS-separated) into full max_length rows
    max_rows: int | None = None  # use at most this many dataset rows (None: all)
    eval_rows: int = 64  # rows held out for evaluation and acceptance prompts
    max_turn_chars: int = 4000  # drop conversations with a longer turn (chitchat has 95k-char turns)
    regenerate: bool = False  # rewrite assistant turns with the target itself
    regenerate_max_new_tokens: int = 256
    regenerate_temperature: float = 0.0
    seed: int = 0


@dataclass
class OptimConfig:
    lr: float = 3e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    warmup_steps: int = 50
    max_steps: int = 1000  # optimizer steps
    max_minutes: float | None = None  # also stop (evaluate, save final/) after this much training wall time
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    batch_size: int = 4  # rows per device per micro-batch
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    mixed_precision: str = "no"  # no | bf16 | fp16
    seed: int = 0


@dataclass
class CheckpointConfig:
    output_dir: str = "runs/draft"
    save_every: int = 200  # optimizer steps; a final checkpoint is always written
    keep_last: int = 2  # older step-* folders are deleted (final/ is kept)
    resume: bool = False  # continue from the newest complete checkpoint in output_dir


@dataclass
class LoggingConfig:
    log_every: int = 10
    trackers: list[str] = field(default_factory=list)  # tensorboard, wandb (offline without a key)
    project: str = "draftsmith"
    run_name: str | None = None
    eval_every: int = 200  # held-out loss and acceptance proxies
    eval_batches: int = 8
    acceptance_every: int = 0  # real mean_acceptance_length through the runtime; 0: at the end only
    acceptance_prompts: int = 4
    acceptance_k: int = 4
    acceptance_max_new_tokens: int = 64
    progress: bool = True


@dataclass
class Recipe:
    model: ModelConfig = field(default_factory=ModelConfig)
    drafter: typing.Any = field(default_factory=DraftLMConfig)  # one of DRAFTER_CONFIGS
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CHOICES = {
    "model.target_dtype": ("auto", "float32", "bfloat16", "float16"),
    "data.format": ("auto", "chat", "text"),
    "optim.mixed_precision": ("no", "bf16", "fp16"),
    "drafter.loss": ("fkl", "rkl", "jsd", "tvd", "ce"),
    "drafter.labels": ("tokens", "distill"),
    "drafter.mode": ("medusa1", "medusa2"),
    "drafter.lm_loss": ("ce", "kl"),
}


# --- building dataclasses from plain dicts, strictly ------------------------------------------


def _build(cls, data, where: str):
    if not isinstance(data, dict):
        raise DraftsmithError(f"{where or 'recipe'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{_join(where, close[0])}'?)" if close else f"; valid keys: {', '.join(names)}"
            raise DraftsmithError(f"unknown config key '{_join(where, key)}'{hint}")
    kwargs = {}
    for name in names:
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], _join(where, name))
    return cls(**kwargs)


def _join(where: str, key) -> str:
    return f"{where}.{key}" if where else str(key)


def _convert(value, hint, where: str):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, args[0], where)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if hint is typing.Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    if value is None:
        raise DraftsmithError(f"config key '{where}' must not be null")
    raise DraftsmithError(f"config key '{where}': expected {getattr(hint, '__name__', hint)}, got {value!r}")


def recipe_from_dict(data: dict) -> Recipe:
    data = dict(data or {})
    drafter = dict(data.pop("drafter", None) or {})
    kind = drafter.get("kind", "draft_lm")
    if kind not in DRAFTER_CONFIGS:
        raise DraftsmithError(f"config key 'drafter.kind': unknown drafter {kind!r}; trainable kinds: {', '.join(DRAFTER_CONFIGS)}")
    recipe = _build(Recipe, data, "")
    recipe.drafter = _build(DRAFTER_CONFIGS[kind], drafter, "drafter")
    for key, allowed in CHOICES.items():
        section, name = key.split(".")
        obj = getattr(recipe, section)
        if hasattr(obj, name) and getattr(obj, name) not in allowed:
            raise DraftsmithError(f"config key '{key}': {getattr(obj, name)!r} is not one of {', '.join(allowed)}")
    _check_values(recipe)
    return recipe


def _check_values(r: Recipe) -> None:
    checks = [
        (r.optim.lr > 0, "optim.lr must be > 0"),
        (r.optim.max_steps >= 1, "optim.max_steps must be >= 1"),
        (r.optim.max_minutes is None or r.optim.max_minutes > 0, "optim.max_minutes must be > 0 (or null)"),
        (r.optim.batch_size >= 1, "optim.batch_size must be >= 1"),
        (r.optim.grad_accum >= 1, "optim.grad_accum must be >= 1"),
        (0 <= r.optim.warmup_steps, "optim.warmup_steps must be >= 0"),
        (0 <= r.optim.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1]"),
        (len(r.optim.betas) == 2, "optim.betas must be two numbers"),
        (r.data.max_length >= 8, "data.max_length must be >= 8"),
        (r.data.eval_rows >= 1, "data.eval_rows must be >= 1"),
        (r.checkpoint.save_every >= 1, "checkpoint.save_every must be >= 1"),
        (r.checkpoint.keep_last >= 1, "checkpoint.keep_last must be >= 1"),
        (set(r.logging.trackers) <= {"tensorboard", "wandb"}, "logging.trackers: choose from tensorboard, wandb"),
    ]
    d = r.drafter
    if isinstance(d, DraftLMConfig):
        checks += [
            (0 <= d.on_policy_fraction <= 1, "drafter.on_policy_fraction must be in [0, 1]"),
            (d.temperature > 0, "drafter.temperature must be > 0"),
            (0 < d.jsd_beta < 1, "drafter.jsd_beta must be in (0, 1)"),
            (d.lora.r >= 0, "drafter.lora.r must be >= 0"),
        ]
    if isinstance(d, MedusaTrainConfig):
        checks += [
            (d.num_heads >= 1, "drafter.num_heads must be >= 1"),
            (d.num_layers >= 0, "drafter.num_layers must be >= 0"),
            (0 < d.decay <= 1, "drafter.decay must be in (0, 1]"),
            (d.heads_loss_weight > 0, "drafter.heads_loss_weight must be > 0"),
            (d.heads_lr_multiplier > 0, "drafter.heads_lr_multiplier must be > 0"),
            (d.lora.r >= 0, "drafter.lora.r must be >= 0"),
            (d.mode != "medusa2" or d.lora.r > 0, "drafter.mode medusa2 trains the target through LoRA: drafter.lora.r must be > 0"),
        ]
    if isinstance(d, (EagleTrainConfig, Eagle3TrainConfig)):
        checks += [
            (d.noise >= 0, "drafter.noise must be >= 0"),
            (d.intermediate_size is None or d.intermediate_size >= 1, "drafter.intermediate_size must be >= 1"),
        ]
    if isinstance(d, EagleTrainConfig):
        checks += [(d.feature_loss_weight >= 0 and d.cls_loss_weight >= 0 and d.feature_loss_weight + d.cls_loss_weight > 0,
                    "drafter.feature_loss_weight and drafter.cls_loss_weight must be >= 0, not both 0")]
    if isinstance(d, Eagle3TrainConfig):
        checks += [
            (d.ttt_steps >= 1, "drafter.ttt_steps must be >= 1"),
            (0 < d.ttt_decay <= 1, "drafter.ttt_decay must be in (0, 1]"),
            (d.draft_vocab_size >= 2, "drafter.draft_vocab_size must be >= 2"),
            (d.aux_layers is None or len(d.aux_layers) >= 1, "drafter.aux_layers: give at least one layer (or null for the default)"),
        ]
    for ok, msg in checks:
        if not ok:
            raise DraftsmithError(msg)


# --- YAML + overrides --------------------------------------------------------------------------


def parse_overrides(args: list[str]) -> dict[str, object]:
    """`--optim.lr=3e-4` or `--optim.lr 3e-4` -> {"optim.lr": 0.0003} (values parsed as YAML)."""
    out, i = {}, 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
            raise DraftsmithError(f"unexpected argument {arg!r}: overrides look like --section.key=value")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise DraftsmithError(f"override --{key} has no value")
            value = args[i + 1]
            i += 1
        out[key] = yaml.safe_load(value) if value != "" else ""
        i += 1
    return out


def apply_overrides(data: dict, overrides: dict[str, object]) -> dict:
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise DraftsmithError(f"override --{dotted}: '{p}' is not a section")
            node = child
        node[leaf] = value
    return data


def load_recipe(path: str | pathlib.Path, overrides: list[str] | dict | None = None) -> Recipe:
    path = pathlib.Path(path)
    if not path.is_file():
        raise DraftsmithError(f"recipe {path} not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise DraftsmithError(f"recipe {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise DraftsmithError(f"recipe {path}: expected a mapping of sections at the top level")
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    return recipe_from_dict(apply_overrides(data, overrides or {}))


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False)
