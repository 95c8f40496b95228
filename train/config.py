"""Training recipes: typed dataclasses, YAML instances, dotted command-line overrides.

A recipe (`configs/<target>/<drafter>.yaml`) is one `Recipe`: six sections, each a dataclass.
Loading is strict: an unknown or mistyped key, a wrong type or a bad value is a DraftsmithError
that names the key (with a "did you mean" when one is close), before any model loads.

Every int/float knob carries its bounds on its own annotation, `typing.Annotated` with
annotated-types' `Ge`, `Gt` and `Interval` (the metadata pydantic reads too), and a `Note` where a
boundary value means something: `save_every: Annotated[int, Ge(0), Note("0: only at the end")]`.
`check_ranges` enforces them, the reference pages print them, and a test fails for a numeric knob
without bounds. `json_schema()` (`python -m draftsmith.train.config`) is the schema for editors.

Why not pydantic for the loading itself: its lax mode turns `true` into 1, 5.0 into 5 and "yes"
into True, and its strict mode refuses "3e-4" (YAML 1.1 reads it as a string), a number where a
string goes and a single value where a list goes, all of which a recipe allows. Matching our rules
takes a validator per type plus a translation of its errors into one line with "did you mean", more
code than the converter below; so pydantic only writes the schema, from the same annotations.

    recipe = load_recipe("configs/tiny/draft_lm.yaml", ["--optim.lr=3e-4", "--data.max_length", "256"])

The `drafter` section is polymorphic: its `kind` picks the dataclass from the table of kinds
(draftsmith/kinds.py, resolved lazily here), so each drafter declares exactly the knobs it has.
That dataclass, `<Kind>TrainConfig`, lives in the kind's task file (train/tasks/<kind>.py); what the
kinds share stays here (LoraConfig, the divergences, the bounds checking). A drafter dataclass may
define `checks() -> [(ok, message)]` for rules that span several of its keys, and `CHOICES` for
the allowed values of its string knobs.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Annotated

import yaml
from annotated_types import Ge, GroupedMetadata, Gt, Interval, Le, Lt

from draftsmith.errors import DraftsmithError


@dataclass(frozen=True)
class Note:
    """What a value at a bound means, shown after the range: `Annotated[int, Ge(0), Note("0: off")]`
    reads ">=0 (0: off)" in the reference and in the error. Alone it documents an unbounded knob."""

    text: str


Seed = Annotated[int, Interval(ge=0, le=4294967295)]  # numpy's seed range (accelerate's set_seed seeds numpy too)

# `drafter.divergence`, the same switch for every kind: what the draft's law q is pulled towards the
# target's law p by (train/losses.py computes them). Under lossless speculative sampling a drafted
# token is accepted with probability 1 - TV(p, q) (Leviathan et al. 2023, sec. 3), so:
#   fkl  forward KL(p || q): mass-covering; classic distillation (Hinton et al. 2015). Same gradient as
#        cross-entropy to the target's soft labels, which EAGLE, EAGLE-3, Medusa and DFlash train with.
#   rkl  reverse KL(q || p): mode-seeking (MiniLLM, Gu et al. 2024).
#   jsd  generalised JSD_beta (GKD, Agarwal et al. 2024), `jsd_beta` in (0, 1).
#   tvd  total variation: its value is 1 - the expected acceptance of one drafted token, i.e.
#        the objective acceptance itself (DistillSpec, Zhou et al. 2023, sec. 3).
#   ce   (draft_lm, pard) cross-entropy on the data's tokens: not a divergence to the target.
DIVERGENCES = ("fkl", "rkl", "jsd", "tvd")


def divergence_checks(cfg, *, ce: bool = False, soft: bool = True) -> list[tuple[bool, str]]:
    """`cfg.divergence` for a kind: `ce` allowed or not; `soft` False: the recipe's labels are the
    data's tokens, so a divergence other than the default would be silently unused."""
    allowed = DIVERGENCES + (("ce",) if ce else ())
    return [
        (
            cfg.divergence in allowed,
            f"config key 'drafter.divergence': {cfg.divergence!r} is not one of {', '.join(allowed)}",
        ),
        (
            soft or cfg.divergence == "fkl",
            f"drafter.divergence {cfg.divergence} compares with the target's distribution: set drafter.labels: distill",
        ),
    ]


def take_old_loss_key(cfg) -> None:
    """`drafter.loss`, the draft LM's and PARD's key before `drafter.divergence`: still read (a
    recipe key is a contract), with a warning; the two may not disagree."""
    if cfg.loss is None:
        return
    warnings.warn(
        "config key 'drafter.loss' is deprecated: write 'drafter.divergence' (same values)", FutureWarning, stacklevel=2
    )
    if cfg.divergence not in ("fkl", cfg.loss):
        raise DraftsmithError(
            f"drafter.loss {cfg.loss!r} and drafter.divergence {cfg.divergence!r} disagree: keep drafter.divergence"
        )
    cfg.divergence, cfg.loss = cfg.loss, None


@dataclass
class ModelConfig:
    target: str = "smollm2-135m-instruct"  # built-in name, folder, .gguf or Hub id; frozen, never saved
    target_dtype: str = "auto"  # auto: bfloat16 on CUDA or under bf16 mixed precision, else float32
    # whole | readers: only the embedding, final norm and LM head, for drafters trained from a
    # feature cache (drafter.features: DIR); the target then cannot run, so no held-out evaluation,
    # no acceptance during training, no regeneration in process (what a 70B target needs)
    target_parts: str = "whole"

    def checks(self, r) -> list[tuple[bool, str]]:
        if self.target_parts != "readers":
            return []
        fix = "or load it whole (model.target_parts: whole)"
        return [
            (
                getattr(r.drafter, "features", "online") != "online",
                "model.target_parts readers trains from a feature cache: set drafter.features=DIR (draftsmith "
                f"features RECIPE --output-dir DIR writes it; EAGLE, EAGLE-3 and DFlash read one) {fix}",
            ),
            (
                r.logging.eval_every == 0,
                "model.target_parts readers cannot run the target for held-out evaluation: set "
                f"logging.eval_every=0 {fix}",
            ),
            (
                r.logging.acceptance_prompts == 0,
                "model.target_parts readers cannot decode to measure acceptance during training: set "
                f"logging.acceptance_prompts=0 and measure the checkpoint with draftsmith crosscheck or bench {fix}",
            ),
            (
                r.data.source != "regenerated" or r.data.regenerate_with == "endpoint",
                "model.target_parts readers cannot regenerate the replies in process: use "
                f"data.regenerate_with=endpoint (vllm serve) {fix}",
            ),
        ]


@dataclass
class LoraConfig:
    # 0: full fine-tuning; > 0: LoRA adapters via peft (Hu et al. 2021)
    r: Annotated[int, Ge(0), Note("0: full fine-tuning")] = 0
    alpha: Annotated[int, Gt(0)] = 16
    dropout: Annotated[float, Interval(ge=0, lt=1)] = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    merge: bool = True  # merge adapters into the weights when saving: checkpoints load as plain LMs


@dataclass
class DataConfig:
    path: str = "chitchat"  # chitchat | sharegpt | stdlib | a datasets hub id | a local .json/.jsonl/.parquet
    name: str | None = None  # datasets config name
    split: str = "train"
    format: str = "auto"  # auto | chat | text
    messages_column: str = "messages"
    text_column: str = "text"
    max_length: Annotated[int, Ge(8)] = 512  # tokens per training row
    pack: bool = True  # whole conversations side by side in max_length rows, each on its own (docs/data.md)
    max_rows: Annotated[int, Ge(1)] | None = None  # use at most this many dataset rows (None: all)
    eval_rows: Annotated[int, Ge(1)] = 64  # rows held out for evaluation and acceptance prompts
    max_turn_chars: Annotated[int, Ge(1)] = 4000  # drop conversations with a longer turn (chitchat has 95k-char turns)
    # The data the drafter imitates, one switch: corpus (the dataset's replies as they are) |
    # regenerated (assistant turns rewritten by the target itself: its own law, train/data/regeneration.py) |
    # on_policy (the draft LM's own samples, scored by the target: DistillSpec / GKD; share of steps:
    # drafter.on_policy_fraction, 1 unless set; the other steps train on the corpus, or on
    # regenerated replies with regenerate: true).
    source: str = "corpus"  # corpus | regenerated | on_policy: what the drafter imitates (the comment above)
    regenerate: bool = False  # the older spelling of source: regenerated (either may be given)
    regenerate_with: str = "batched"  # batched (in-process, many chats at once) | engine (batch 1) | endpoint
    # regenerate only the first N usable rows; the rest train as they are
    regenerate_max_rows: Annotated[int, Ge(1)] | None = None
    # None: data.max_length (a reply may fill a training row)
    regenerate_max_new_tokens: Annotated[int, Ge(1)] | None = None
    regenerate_temperature: Annotated[float, Ge(0), Note("0: greedy")] = 0.0
    regenerate_batch_size: Annotated[int, Ge(1)] = 16  # batched: chats whose next reply is decoded together
    regenerate_endpoint: str | None = None  # endpoint: an OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1
    regenerate_model: str | None = None  # endpoint: the served model name (part of the cache key)
    regenerate_concurrency: Annotated[int, Ge(1)] = 8  # endpoint: requests in flight
    regenerate_timeout_s: Annotated[float, Gt(0)] = 300.0  # endpoint: per request
    # endpoint: the environment variable holding its API key (the key itself never goes in a recipe)
    regenerate_api_key_env: str = "OPENAI_API_KEY"
    # endpoint: extra tries on transient failures (refused, reset, timeout, 429, 5xx)
    regenerate_retries: Annotated[int, Ge(0), Note("0: no retries")] = 3
    # A JSONL file of the regenerated chats: written by the run that regenerates (e.g. `draftsmith train
    # RECIPE --data-only` with the endpoint's URL), read by every later run of the recipe, so training
    # finds the regenerated replies without repeating the regeneration's overrides. Delete it to regenerate.
    regenerated_path: str | None = None
    # Keyword arguments to the target's chat template, for regeneration and training prompts alike,
    # e.g. {enable_thinking: false} for Qwen3 (a drafter trained with thinking off fails with it on).
    chat_template_kwargs: dict = field(default_factory=dict)
    seed: Seed = 0

    def max_new_tokens(self) -> int:
        """Tokens a regenerated reply may have: regenerate_max_new_tokens, else max_length."""
        return self.regenerate_max_new_tokens or self.max_length

    def endpoint_checks(self) -> list[tuple[bool, str]]:
        """An endpoint needs its URL and model name; a URL without regenerate_with=endpoint would be ignored."""
        url, endpoint = self.regenerate_endpoint, self.regenerate_with == "endpoint"
        return [
            (
                not endpoint or bool(url) or bool(self.regenerated_path),
                "data.regenerate_with=endpoint needs data.regenerate_endpoint (e.g. http://127.0.0.1:8000/v1)",
            ),
            (
                not url or url.startswith(("http://", "https://")),
                f"data.regenerate_endpoint must be an http(s):// URL, got {url!r}",
            ),
            (
                not endpoint or bool(self.regenerate_model) or bool(self.regenerated_path),
                "data.regenerate_with=endpoint needs data.regenerate_model (the served model name)",
            ),
            (endpoint or not url, "data.regenerate_endpoint is set: add data.regenerate_with=endpoint to use it"),
        ]


DEFAULT_MAX_STEPS = 1000  # optim.max_steps when neither it nor optim.epochs is given


@dataclass
class OptimConfig:
    lr: Annotated[float, Gt(0)] = 3e-4
    weight_decay: Annotated[float, Ge(0)] = 0.0
    betas: list[Annotated[float, Interval(ge=0, lt=1)]] = field(default_factory=lambda: [0.9, 0.95])
    warmup_steps: Annotated[int, Ge(0)] = 50
    # optimizer steps; with optim.epochs, a cap on the steps the epochs give (unset: 1000 without epochs)
    max_steps: Annotated[int, Ge(1)] | None = None
    # passes over the training rows: the steps follow from the rows, the processes, batch_size and grad_accum
    epochs: Annotated[float, Gt(0)] | None = None
    # warm-up as a share of the run's steps; replaces warmup_steps when set
    warmup_ratio: Annotated[float, Interval(ge=0, lt=1)] | None = None
    # also stop (evaluate, save final/) after this much training wall time
    max_minutes: Annotated[float, Gt(0)] | None = None
    min_lr_ratio: Annotated[float, Interval(ge=0, le=1)] = 0.1  # cosine decays to lr * min_lr_ratio
    batch_size: Annotated[int, Ge(1)] = 4  # rows per device per micro-batch
    grad_accum: Annotated[int, Ge(1)] = 1
    max_grad_norm: Annotated[float, Ge(0), Note("0: no clipping")] = 1.0
    # no | bf16 | fp16 | auto: bf16 where the device computes it fast (CUDA; AMX/AVX512-BF16 CPUs), else no
    mixed_precision: str = "no"
    seed: Seed = 0


@dataclass
class CheckpointConfig:
    output_dir: str = "runs/draft"
    # optimizer steps; 0: none but the last step's (final/ and SIGTERM's are always written)
    save_every: Annotated[int, Ge(0), Note("0: only at the end")] = 200
    keep_last: Annotated[int, Ge(1)] = 2  # older complete step-* folders are deleted (final/ is kept)
    resume: bool = False  # continue from the newest complete checkpoint in output_dir
    # SIGTERM (SLURM's preemption; it kills 30 s later by default), at any moment: the run finishes
    # the training step, evaluation batch or decoding step in progress (an evaluation or acceptance
    # measurement is abandoned, not the checkpoint), saves a resumable checkpoint and exits 143.
    # On the tiny recipes that takes a few seconds; the tests hold it to 20 s on a busy 2-core machine.
    # Multi-process runs: a process waits this long at a collective (a gradient all-reduce, a barrier)
    # for the others, then the run stops with one line naming the process that did not answer. A
    # process that is killed is noticed within seconds (its connections close); this bounds a hung
    # one or a machine gone silently. 600 s is NCCL's own default (gloo's is 1800 s). It must exceed
    # the longest phase the main process runs alone while the others wait (data preparation, the
    # acceptance measurement, writing a checkpoint) and the processes' spread in reaching the start.
    # multi-process: wait for a silent process, then stop naming it
    collective_timeout_s: Annotated[float, Gt(0)] = 600.0


@dataclass
class LoggingConfig:
    # optimizer steps per logged average; 0: only the last step logs
    log_every: Annotated[int, Ge(0), Note("0: only the last step")] = 10
    trackers: list[str] = field(default_factory=list)  # tensorboard, wandb (offline without a key)
    project: str = "draftsmith"
    run_name: str | None = None
    # held-out loss and acceptance proxies; 0: only the final evaluation
    eval_every: Annotated[int, Ge(0), Note("0: only the final evaluation")] = 200
    eval_batches: Annotated[int, Ge(1)] = 8
    # real mean_acceptance_length through the runtime; 0: at the end only
    acceptance_every: Annotated[int, Ge(0), Note("0: at the end only")] = 0
    acceptance_prompts: Annotated[int, Ge(0), Note("0: not measured")] = 4  # 0: never measured through the runtime
    # None: the kind's default_k (draftsmith/kinds.py), as eval and bench use
    acceptance_k: Annotated[int, Ge(1)] | None = None
    acceptance_max_new_tokens: Annotated[int, Ge(1)] = 64
    progress: bool = True


@dataclass
class Recipe:
    model: ModelConfig = field(default_factory=ModelConfig)
    drafter: typing.Any = field(default_factory=lambda: _kind_config(DEFAULT_KIND)())  # the kind's dataclass
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# The allowed values of the sections' string knobs. A kind's own (`drafter.labels`, `drafter.mode`, ...)
# are its dataclass's `CHOICES`; `choices()` joins them, and `CHOICES` is that table over every kind.
_CHOICES = {
    "model.target_dtype": ("auto", "float32", "bfloat16", "float16"),
    "model.target_parts": ("whole", "readers"),
    "data.format": ("auto", "chat", "text"),
    "data.regenerate_with": ("batched", "engine", "endpoint"),
    "data.source": ("corpus", "regenerated", "on_policy"),
    "optim.mixed_precision": ("no", "bf16", "fp16", "auto"),
    "drafter.divergence": (*DIVERGENCES, "ce"),  # which kinds take ce: their checks()
}


def choices(drafter_configs=None) -> dict[str, tuple[str, ...]]:
    """key -> allowed values: the sections' own, then those the `drafter:` dataclasses declare in
    their `CHOICES` (`drafter_configs`: those dataclasses; every trainable kind's by default)."""
    if drafter_configs is None:
        from draftsmith.kinds import drafter_configs as registered

        drafter_configs = registered().values()
    table = dict(_CHOICES)
    for cls in drafter_configs:
        for name, allowed in getattr(cls, "CHOICES", {}).items():
            key = f"drafter.{name}"
            table[key] = tuple(dict.fromkeys(table.get(key, ()) + tuple(allowed)))
    return table


DEFAULT_KIND = "draft_lm"  # a recipe without drafter.kind


def _kind_config(kind: str) -> type:
    from draftsmith.kinds import KINDS

    return KINDS[kind].config


def __getattr__(name: str):
    if name == "CHOICES":
        return choices()
    raise AttributeError(f"module 'draftsmith.train.config' has no attribute {name!r}")


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
    if hint is dict and isinstance(value, dict):
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):
                raise DraftsmithError(f"config key '{where}': expected a finite number, got {value!r}")
            return number
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, bool) and ("no" if value is False else "yes") in _CHOICES.get(where, ()):
            return "no" if value is False else "yes"  # YAML 1.1 reads a bare `no` (`yes`) as a bool
    if value is None:
        raise DraftsmithError(f"config key '{where}' must not be null")
    raise DraftsmithError(f"config key '{where}': expected {getattr(hint, '__name__', hint)}, got {value!r}")


def recipe_from_dict(data: dict, *, drafter_configs: dict[str, type] | None = None) -> Recipe:
    """A recipe from its sections; `drafter.kind` picks its dataclass from the kind registry
    (draftsmith/kinds.py), or from `drafter_configs` (kind -> dataclass) where one is given."""
    from draftsmith.kinds import KINDS, Kind

    data = dict(data or {})
    drafter = dict(data.pop("drafter", None) or {})
    kind = drafter.get("kind", DEFAULT_KIND)
    if drafter_configs is None:
        trainable = [k.name for k in KINDS.values() if k.config_ref is not None]
        drafter_configs = {kind: KINDS[kind].config} if kind in trainable else dict.fromkeys(trainable)
    if kind not in drafter_configs:
        raise DraftsmithError(
            f"config key 'drafter.kind': unknown drafter {kind!r}; trainable kinds: {', '.join(drafter_configs)}"
        )
    recipe = _build(Recipe, {**data, "drafter": None}, "")  # the sections first, as they are listed
    recipe.drafter = _build(drafter_configs[kind], drafter, "drafter")
    for key, allowed in choices([type(recipe.drafter)]).items():
        section, name = key.split(".")
        obj = getattr(recipe, section)
        if hasattr(obj, name) and getattr(obj, name) not in allowed:
            raise DraftsmithError(f"config key '{key}': {getattr(obj, name)!r} is not one of {', '.join(allowed)}")
    _check_values(recipe)
    if recipe.logging.acceptance_k is None:  # one default K per kind: training measures what eval and bench run
        entry = KINDS.get(kind)
        recipe.logging.acceptance_k = entry.default_k if entry else Kind.__dataclass_fields__["default_k"].default
    return recipe


def resolve_data_source(r: Recipe) -> None:
    """data.source against the older knobs that say the same (data.regenerate, the draft LM's
    drafter.on_policy_fraction): one meaning whichever is written, or one clear error."""
    d, fraction = r.data, getattr(r.drafter, "on_policy_fraction", None)
    if d.source == "regenerated":
        d.regenerate = True
    elif d.source == "corpus" and d.regenerate:
        d.source = "regenerated"
    if d.source == "on_policy":
        if fraction is None:
            raise DraftsmithError(
                f"data.source on_policy samples from the drafter, which the draft LM can do (drafter.kind draft_lm); "
                f"a {r.drafter.kind} drafter trains on corpus or regenerated data"
            )
        if fraction == 0:
            r.drafter.on_policy_fraction = 1.0
    elif fraction:  # on_policy_fraction alone, as recipes wrote it before data.source
        d.source = "on_policy"


def _check_values(r: Recipe) -> None:
    resolve_data_source(r)
    if r.optim.max_steps is None and r.optim.epochs is None:  # the trainer derives them from epochs
        r.optim.max_steps = DEFAULT_MAX_STEPS
    check_ranges(r)
    checks = [
        (len(r.optim.betas) == 2, "optim.betas must be two numbers"),
        (set(r.logging.trackers) <= {"tensorboard", "wandb"}, "logging.trackers: choose from tensorboard, wandb"),
        *r.data.endpoint_checks(),
        *r.model.checks(r),
    ]
    if hasattr(r.drafter, "checks"):
        checks += r.drafter.checks()
    for ok, msg in checks:
        if not ok:
            raise DraftsmithError(msg)


def check_ranges(obj, where: str = "") -> None:
    """Every field of `obj` and its nested sections against the bounds on its annotation (None
    passes: an optional knob left unset; a list is checked item by item)."""
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), _join(where, f.name)
        if dataclasses.is_dataclass(value):
            check_ranges(value, key)
            continue
        bounds = [m for m in _metadata(hints[f.name]) if type(m) in _WITHIN]
        if not bounds or value is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            if not all(_WITHIN[type(m)](v, m) for m in bounds):
                raise DraftsmithError(
                    f"config key '{key}' must be {_describe(range_spec(hints[f.name]))}, got {value!r}"
                )


_WITHIN = {Ge: lambda v, m: v >= m.ge, Gt: lambda v, m: v > m.gt, Le: lambda v, m: v <= m.le, Lt: lambda v, m: v < m.lt}


def _metadata(hint) -> list:
    """The metadata on `hint`'s Annotated leaf (through Optional and list), intervals split in two."""
    if typing.get_origin(hint) is typing.Annotated:
        return [m for meta in hint.__metadata__ for m in (meta if isinstance(meta, GroupedMetadata) else [meta])]
    return [m for arg in typing.get_args(hint) for m in _metadata(arg)]


def range_spec(hint) -> str | None:
    """A field's bounds as the reference pages write them: ">=1", ">0", "[0, 1)", ">=0 (0: off)";
    a Note alone (no bounds) is its text; None where the field has neither."""
    meta = _metadata(hint)
    low = [(">=", m.ge) for m in meta if isinstance(m, Ge)] + [(">", m.gt) for m in meta if isinstance(m, Gt)]
    high = [("<=", m.le) for m in meta if isinstance(m, Le)] + [("<", m.lt) for m in meta if isinstance(m, Lt)]
    notes = "; ".join(m.text for m in meta if isinstance(m, Note))
    if low and high:
        (lo_op, lo), (hi_op, hi) = low[0], high[0]
        bounds = f"{'[' if lo_op == '>=' else '('}{lo}, {hi}{']' if hi_op == '<=' else ')'}"
    else:
        bounds = "".join(map(str, (low or high or [("", "")])[0]))
    if bounds and notes:
        return f"{bounds} ({notes})"
    return bounds or notes or None


def ranges(cls) -> dict[str, str]:
    """field name -> its `range_spec`, for the fields of `cls` that declare one."""
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = {f.name: range_spec(hints[f.name]) for f in dataclasses.fields(cls)}
    return {name: spec for name, spec in specs.items() if spec}


def numeric_fields(cls) -> list[str]:
    """Names of `cls`'s int/float fields (optional or lists of numbers too): each declares its bounds."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in dataclasses.fields(cls) if _leaf_types(hints[f.name]) & {int, float}]


def _leaf_types(hint) -> set:
    if typing.get_origin(hint) in (typing.Union, types.UnionType, list):
        return set().union(*(_leaf_types(a) for a in typing.get_args(hint)))
    return {hint}


def _describe(spec: str) -> str:
    """ ">=0 (0: off)" -> ">= 0 (0: off)"; "(0, 1]" -> "in (0, 1]"."""
    bounds, paren, note = spec.partition(" (")
    for op in (">=", ">", "<=", "<"):
        if bounds.startswith(op):
            return f"{op} {bounds[len(op) :]}{paren}{note}"
    return f"in {bounds}{paren}{note}"


def json_schema() -> dict:
    """The recipe's JSON Schema, for editors (a YAML language server checks and completes a recipe
    with it): every key's type, default and bounds, the string knobs' choices (a free-text knob takes
    a number too, as the loader does), unknown keys refused, and `drafter` as one of the kinds'
    dataclasses. `python -m draftsmith.train.config` prints it.
    pydantic writes it from the same annotations the loader checks."""
    import pydantic

    from draftsmith.kinds import drafter_configs

    kinds = drafter_configs()
    schema = pydantic.TypeAdapter(Recipe).json_schema()
    drafter = pydantic.TypeAdapter(typing.Union[tuple(kinds.values())]).json_schema()  # noqa: UP007
    defs = {**schema.pop("$defs", {}), **drafter.pop("$defs", {})}
    schema["properties"]["drafter"] = drafter
    sections = [(name, hint) for name, hint in typing.get_type_hints(Recipe).items() if name != "drafter"]
    sections += [("drafter", cls) for cls in kinds.values()]
    sections += [("drafter.lora", LoraConfig)]
    for kind, cls in kinds.items():
        defs[cls.__name__]["properties"]["kind"]["const"] = kind
    table = choices(kinds.values())
    for prefix, cls in sections:
        for name, prop in defs[cls.__name__]["properties"].items():
            string = next((p for p in prop.get("anyOf", [prop]) if p.get("type") == "string"), None)
            if string is not None and "const" not in string:  # a string knob: its choices, or any text
                allowed = table.get(f"{prefix}.{name}")
                string.update({"enum": list(allowed)} if allowed else {"type": ["string", "number"]})
    for d in [schema, *defs.values()]:
        d["additionalProperties"] = False
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "$defs": defs}


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


def load_recipe(
    path: str | pathlib.Path,
    overrides: list[str] | dict | None = None,
    *,
    drafter_configs: dict[str, type] | None = None,
) -> Recipe:
    """A YAML recipe with dotted overrides (`--section.key=value`); unknown keys are errors."""
    path = pathlib.Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.yaml"))[:5]
        raise DraftsmithError(
            f"recipe {path} is a directory, not a YAML file"
            + (f": pass one of its recipes ({', '.join(inside)})" if inside else "")
        )
    if not path.is_file():
        raise DraftsmithError(f"recipe {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise DraftsmithError(f"recipe {path} is not valid YAML: {_yaml_problem(e)}") from None
    except UnicodeDecodeError:
        raise DraftsmithError(f"recipe {path} is not a text file (not UTF-8): pass a YAML recipe") from None
    except OSError as e:
        raise DraftsmithError(f"recipe {path} could not be read: {e.strerror or e}") from None
    if data is None:  # an empty file, or only comments: refuse rather than train every default
        raise DraftsmithError(
            f"recipe {path} is empty: write a recipe (model, drafter, data, optim sections) "
            "or start from one in configs/, e.g. configs/tiny/draft_lm.yaml"
        )
    if not isinstance(data, dict):
        raise DraftsmithError(f"recipe {path}: expected a mapping of sections at the top level")
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    return recipe_from_dict(apply_overrides(data, overrides or {}), drafter_configs=drafter_configs)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: what it was parsing where, and what went wrong where."""

    def at(text, mark):
        return f"{text} (line {mark.line + 1}, column {mark.column + 1})" if text and mark else text

    parts = [
        at(getattr(e, "context", None), getattr(e, "context_mark", None)),
        at(getattr(e, "problem", None), getattr(e, "problem_mark", None)),
    ]
    return ": ".join(p for p in parts if p) or str(e).splitlines()[0]


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False)


if __name__ == "__main__":  # python -m draftsmith.train.config > recipe.schema.json
    import json

    from draftsmith.train import config  # the package's module, the one the kinds' task files import

    print(json.dumps(config.json_schema(), indent=2))
