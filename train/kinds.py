"""One declaration per drafter kind: the single place a kind is named.

Each `Kind` says what the kind is made of (its runtime drafter in models/, its recipe's
`drafter:` dataclass and its training task in train/) and what the layers above need to know
about it (the export formats it has, its Hub repo-name suffix, what its model card says). The
CLI, the trainer, the exports, the cross-check and the card read `KINDS`; none of them spells
a kind name in an `if`. Adding a kind = its model file, its task file, its recipes, its tests,
one entry below (and, where an engine has a layout of its own for it, that layout in
draftsmith/export/<engine>.py). The models are torchtune's recipe registry and transformers'
auto classes: one dict, no plugin machinery.

This module also turns names into objects for everyone above it: `load_recipe` (a recipe whose
`drafter.kind` picks its dataclass here) and `load_drafter` (the command line's `--draft`).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from draftsmith.models import read_drafter_meta
from draftsmith.models.dflash import DFlash
from draftsmith.models.draft_lm import DraftLM
from draftsmith.models.eagle import Eagle
from draftsmith.models.eagle3 import Eagle3
from draftsmith.models.medusa import Medusa
from draftsmith.models.pard import Pard
from draftsmith.models.prompt_lookup import PromptLookup

from draftsmith.errors import DraftsmithError

from . import config
from .config import DraftLMConfig, Eagle3TrainConfig, EagleTrainConfig, MedusaTrainConfig
from .dflash import DFlashTask, DFlashTrainConfig
from .draft_lm import DraftLMTask
from .eagle import Eagle3Task, EagleTask
from .medusa import MedusaTask
from .pard import PardTask, PardTrainConfig


@dataclass(frozen=True)
class Kind:
    """What one drafter kind is, for every layer that handles it.

    drafter:  the runtime drafter (infer/proposal.py's Drafter); `from_pretrained(folder, target)`
              loads a checkpoint of this kind.
    config:   the recipe's `drafter:` dataclass (None: nothing to train, e.g. prompt lookup).
    task:     the training task the trainer drives (train/trainer.py says what it answers).
    exports:  the formats `draftsmith export` writes for it ("hf" is our own checkpoint layout).
    repo_suffix: the Hub repo-name suffix; vLLM guesses a draft's method from its name.
    title, tag, paper: the model card's "what it is", Hub tag and reference.
    causal_lm: the checkpoint is a plain transformers causal LM (loads in transformers'
              `assistant_model` and as an engine's draft model unchanged).
    k_limit:  the checkpoint config key that caps the tokens drafted per step (Medusa: its heads;
              a parallel drafter: its block), or None.
    crosscheck: the real engines `draftsmith crosscheck` decodes its exports in (vllm, llamacpp).
    card_note: a line the model card adds under its transformers usage.
    """

    name: str
    drafter: type
    config: type | None = None
    task: type | None = None
    exports: tuple[str, ...] = ()
    repo_suffix: str = "draft"
    title: str = ""
    tag: str = ""
    paper: str = ""
    causal_lm: bool = False
    k_limit: str | None = None
    crosscheck: tuple[str, ...] = ()
    card_note: str = ""

    @property
    def trainable(self) -> bool:
        return self.task is not None


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "draft_lm",
            DraftLM,
            DraftLMConfig,
            DraftLMTask,
            exports=("hf", "vllm", "gguf"),
            repo_suffix="draft",
            title="an independent draft model",
            tag="draft-model",
            paper="speculative decoding with a distilled draft LM (Leviathan et al. 2023; DistillSpec, Zhou et al. "
            "2023)",
            causal_lm=True,
            crosscheck=("vllm", "llamacpp"),
        ),
        Kind(
            "medusa",
            Medusa,
            MedusaTrainConfig,
            MedusaTask,
            exports=("hf", "vllm"),
            repo_suffix="medusa",
            title="Medusa heads",
            tag="medusa",
            paper="Medusa (Cai et al. 2024)",
            k_limit="num_heads",
            crosscheck=("vllm",),
        ),
        # "eagle-" anywhere in the name -> vLLM's EAGLE-1 (so not "-eagle" at the end).
        Kind(
            "eagle",
            Eagle,
            EagleTrainConfig,
            EagleTask,
            exports=("hf", "vllm"),
            repo_suffix="eagle-draft",
            title="an EAGLE drafter",
            tag="eagle",
            paper="EAGLE (Li et al. 2024)",
            crosscheck=("vllm",),
        ),
        Kind(
            "eagle3",
            Eagle3,
            Eagle3TrainConfig,
            Eagle3Task,
            exports=("hf", "vllm", "sglang", "gguf"),
            repo_suffix="eagle3",
            title="an EAGLE-3 drafter",
            tag="eagle3",
            paper="EAGLE-3 (Li et al. 2025)",
            crosscheck=("vllm", "llamacpp"),
        ),
        # A causal LM + `pard_token`: vLLM serves it as draft_model with parallel_drafting (export/vllm.py).
        Kind(
            "pard",
            Pard,
            PardTrainConfig,
            PardTask,
            exports=("hf", "vllm"),
            repo_suffix="pard",
            title="a PARD parallel draft model",
            tag="pard",
            paper="PARD: parallel draft model adaptation (An et al. 2025, arXiv 2504.18583)",
            causal_lm=True,
            k_limit="pard_num_speculative_tokens",
            crosscheck=("vllm",),
            card_note="transformers' `assistant_model` drafts with this model one token at a time (no mask tokens): "
            "correct, but not PARD's one-forward drafting, which vLLM (`parallel_drafting`) and draftsmith run.",
        ),
        # One forward fills a block of masks; vLLM: method "dflash" (also guessed from "dflash" in the name).
        Kind(
            "dflash",
            DFlash,
            DFlashTrainConfig,
            DFlashTask,
            exports=("hf", "vllm", "sglang"),
            repo_suffix="dflash",
            title="a DFlash block-diffusion drafter",
            tag="dflash",
            paper="DFlash: block diffusion for flash speculative decoding (z-lab 2026)",
            k_limit="num_speculative_tokens",
            crosscheck=("vllm",),
        ),
        Kind(
            "prompt_lookup",
            PromptLookup,
            title="prompt lookup",
            tag="prompt-lookup",
            paper="prompt lookup decoding (Saxena 2023)",
        ),
    )
}

DRAFTER_CONFIGS: dict[str, type] = {k.name: k.config for k in KINDS.values() if k.config is not None}
TASKS: dict[str, type] = {k.name: k.task for k in KINDS.values() if k.task is not None}


def get_kind(name: str) -> Kind:
    if name not in KINDS:
        raise DraftsmithError(f"unknown drafter kind {name!r}; this version knows {', '.join(KINDS)}")
    return KINDS[name]


def load_recipe(path, overrides: list[str] | dict | None = None) -> config.Recipe:
    """A YAML recipe with dotted overrides; `drafter.kind` picks its dataclass from KINDS."""
    return config.load_recipe(path, overrides, drafter_configs=DRAFTER_CONFIGS)


def recipe_from_dict(data: dict) -> config.Recipe:
    return config.recipe_from_dict(data, drafter_configs=DRAFTER_CONFIGS)


def load_drafter(spec: str, target):
    """The command line's `--draft` value as a drafter for `target`:

    truncated:N          the target's first N layers (draft_lm)
    prompt_lookup[:N]    n-gram lookup in the context, n-grams up to N (default 3)
    a checkpoint folder  written by the trainer: `drafter.json` names its kind and its target
    anything else        a causal LM sharing the target's tokenizer (draft_lm): built-in name,
                         local folder, .gguf file or Hub id
    """
    kind, _, arg = spec.partition(":")
    if kind == "truncated":
        if not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected truncated:N with N a number of layers")
        return DraftLM.truncated(target, int(arg))
    if kind == "prompt_lookup":
        if arg and not arg.isdigit():
            raise DraftsmithError(f"--draft {spec!r}: expected prompt_lookup or prompt_lookup:N (max n-gram size)")
        return PromptLookup(max_ngram=int(arg) if arg else 3)
    meta = read_drafter_meta(spec) if pathlib.Path(spec).is_dir() else None
    if meta is not None:
        if meta["kind"] not in KINDS:
            raise DraftsmithError(f"{spec}: a {meta['kind']!r} checkpoint; this version knows {', '.join(KINDS)}")
        return KINDS[meta["kind"]].drafter.from_pretrained(spec, target)
    return DraftLM.from_pretrained(spec, target)


__all__ = ["DRAFTER_CONFIGS", "KINDS", "TASKS", "Kind", "get_kind", "load_drafter", "load_recipe", "recipe_from_dict"]
