"""The recipe's sections: one dataclass each, every knob with its default, bounds and meaning.

A recipe (`configs/<target>/<drafter>.yaml`) is one `Recipe`: six sections, each a dataclass.
train/config.py loads one from YAML, strictly, and every name here stays importable from there.

The `drafter` section is polymorphic: its `kind` picks the dataclass from the table of kinds
(draftsmith/kinds.py, resolved lazily here), so each drafter declares exactly the knobs it has.
That dataclass, `<Kind>TrainConfig`, lives in the kind's task file (train/tasks/<kind>.py); what the
kinds share stays here (LoraConfig, the divergences) and in train/recipe_bounds.py (the bounds). A
drafter dataclass may define `checks() -> [(ok, message)]` for rules that span several of its keys,
and `CHOICES` for the allowed values of its string knobs.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Ge, Gt, Interval

from draftsmith.errors import DraftsmithError
from draftsmith.train.recipe_bounds import Note

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
    # 60 = 30 held-out rows + 30 built-in prompts of the other domain: the standard error of τ
    # stays under ~0.03 through a CPU-scale run (32 gave 0.035-0.038 at τ ≈ 1.5)
    acceptance_prompts: Annotated[int, Ge(0), Note("0: not measured")] = 60  # 0: never measured through the runtime
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
