"""One declaration per drafter kind, at the bottom of the package: the single place a kind is named.

Each `Kind` says what the kind is made of (its runtime drafter in models/, its recipe's `drafter:`
dataclass and its training task in train/) and what the layers above need to know about it (the
export layouts it has per engine, what caps its K, its Hub repo-name suffix, what its model card
says, the engines `draftsmith crosscheck` proves it in). The CLI, the trainer, the exports, the
cross-check and the card read `KINDS`; none of them spells a kind name in an `if`.

Everything that lives in a heavier module is a lazy reference, a "module:attribute" string, as
transformers' auto mappings are: importing this module loads neither torch nor any drafter, so
`draftsmith --help` starts at once and the lower layers can read the table. `Kind.drafter`,
`Kind.config`, `Kind.task` and `Kind.layout(engine)` import on first use.

Adding a kind = its model file, its task file, its recipes, its tests and ONE entry below (an
engine layout for it, where it has one, is a `Layout` object in that engine's export module,
named here by reference). The models are torchtune's recipe registry and transformers' auto
classes: one dict, no plugin machinery.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError


def resolve(ref: str):
    """ "package.module:attr" -> the object (imported on first use; Python caches the module)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Bench:
    """How scripts/bench_all.py trains a kind for a time budget and what it measures.

    steps_per_minute: optimizer steps per training minute on a 2-core CPU (the script sizes the
              cosine schedule from it, with head-room, so the budget ends training).
    train_flags: recipe overrides beside the recipe (the settings of the measured runs).
    methods:  the shapes benchmarked, (name, k, tree): tree=True drafts the script's 16-node tree.
    """

    steps_per_minute: float
    train_flags: tuple[str, ...] = ()
    methods: tuple[tuple[str, int, bool], ...] = ()


@dataclass(frozen=True)
class Kind:
    """What one drafter kind is, for every layer that handles it.

    drafter_ref: the runtime drafter (infer/proposal.py's Drafter); `from_pretrained(folder, target)`
              loads a checkpoint of this kind.
    config_ref: the recipe's `drafter:` dataclass (None: nothing to train, e.g. prompt lookup).
    task_ref: the training task the trainer drives (a subclass of train/tasks/base.py's TrainingTask).
    exports:  format -> the layout it writes, a reference to a Layout object in that format's
              export module (draftsmith/shipping/export/<format>.py); "hf" (our own checkpoint layout) may
              be None: the checkpoint as it is, checked for its config.json and intact weights.
    repo_suffix: the Hub repo-name suffix; vLLM guesses a draft's method from its name.
    title, tag, paper: the model card's "what it is", Hub tag and reference.
    causal_lm: the checkpoint is a plain transformers causal LM (loads in transformers'
              `assistant_model` and as an engine's draft model unchanged).
    k_limit:  the checkpoint config key that caps the tokens drafted per step (Medusa: its heads;
              a parallel drafter: its block), or None. The loaded drafter reports the same cap as
              `max_speculative_tokens`.
    crosscheck: the real engines `draftsmith crosscheck` decodes its exports in (vllm, llamacpp).
    default_k: the tokens drafted per step (K) when a command or the Python API is given none; a
              capped kind drafts at most its cap (`max_speculative_tokens`) by default.
    card_note: a line the model card adds under its transformers usage.
    tiny_ref: the factory of a tiny instance for the `tiny-random` target, `(kind, target, folder)
              -> (drafter, its --draft value)` (draftsmith/testing.py): the contract suite
              (tests/test_contract.py) runs every entry through it.
    bench:    what scripts/bench_all.py trains and measures for it (None: the script leaves it out).
    """

    name: str
    drafter_ref: str
    config_ref: str | None = None
    task_ref: str | None = None
    exports: dict[str, str | None] = field(default_factory=dict)
    repo_suffix: str = "draft"
    title: str = ""
    tag: str = ""
    paper: str = ""
    causal_lm: bool = False
    k_limit: str | None = None
    crosscheck: tuple[str, ...] = ()
    default_k: int = 4
    card_note: str = ""
    tiny_ref: str | None = None
    bench: Bench | None = None

    @property
    def drafter(self) -> type:
        return resolve(self.drafter_ref)

    @property
    def config(self) -> type | None:
        return resolve(self.config_ref) if self.config_ref else None

    @property
    def task(self) -> type | None:
        return resolve(self.task_ref) if self.task_ref else None

    @property
    def trainable(self) -> bool:
        return self.task_ref is not None

    def layout(self, fmt: str):
        """This kind's layout object for an export format (None for "hf": our own layout)."""
        if fmt not in self.exports:
            raise DraftsmithError(f"no {fmt} export for {self.name!r} drafters (it has {', '.join(self.exports)})")
        ref = self.exports[fmt]
        return resolve(ref) if ref else None


_M, _T, _X = "draftsmith.models", "draftsmith.train", "draftsmith.testing"
_H, _V, _S, _G = (f"draftsmith.shipping.export.{fmt}" for fmt in ("hf", "vllm", "sglang", "gguf"))
# scripts/bench_all.py's budgets: steps/min measured on a 2-core AMD EPYC (DFlash, PARD: with AVX-512)
_WARMUP = ("--optim.warmup_steps=10",)

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "draft_lm",
            f"{_M}.draft_lm:DraftLM",
            f"{_T}.tasks.draft_lm:DraftLMTrainConfig",
            f"{_T}.tasks.draft_lm:DraftLMTask",
            exports={"hf": f"{_H}:DRAFT_LM", "vllm": f"{_V}:DRAFT_LM", "gguf": f"{_G}:DRAFT_LM"},
            repo_suffix="draft",
            title="an independent draft model",
            tag="draft-model",
            paper="speculative decoding with a distilled draft LM "
            "(Leviathan et al. 2023; DistillSpec, Zhou et al. 2023)",
            causal_lm=True,
            crosscheck=("vllm", "llamacpp"),
            tiny_ref=f"{_X}:from_tiny_recipe",
            bench=Bench(3.3, ("--optim.lr=1e-3", "--optim.warmup_steps=10"), (("draft_lm_k2", 2, False),)),
        ),
        Kind(
            "medusa",
            f"{_M}.medusa:Medusa",
            f"{_T}.tasks.medusa:MedusaTrainConfig",
            f"{_T}.tasks.medusa:MedusaTask",
            exports={"hf": f"{_H}:MEDUSA", "vllm": f"{_V}:MEDUSA"},
            repo_suffix="medusa",
            title="Medusa heads",
            tag="medusa",
            paper="Medusa (Cai et al. 2024)",
            k_limit="num_heads",
            crosscheck=("vllm",),
            tiny_ref=f"{_X}:from_tiny_recipe",
            bench=Bench(2.7, ("--optim.grad_accum=1", "--optim.warmup_steps=4"), (("medusa_tree16", 4, True),)),
        ),
        # "eagle-" anywhere in the name -> vLLM's EAGLE-1 (so not "-eagle" at the end).
        Kind(
            "eagle",
            f"{_M}.eagle:Eagle",
            f"{_T}.tasks.eagle:EagleTrainConfig",
            f"{_T}.tasks.eagle:EagleTask",
            exports={"hf": f"{_H}:EAGLE", "vllm": f"{_V}:EAGLE"},
            repo_suffix="eagle-draft",
            title="an EAGLE drafter",
            tag="eagle",
            paper="EAGLE (Li et al. 2024)",
            crosscheck=("vllm",),
            tiny_ref=f"{_X}:from_tiny_recipe",
            bench=Bench(6.0, _WARMUP, (("eagle1_k3", 3, False), ("eagle2_tree16", 4, True))),
        ),
        Kind(
            "eagle3",
            f"{_M}.eagle3:Eagle3",
            f"{_T}.tasks.eagle3:Eagle3TrainConfig",
            f"{_T}.tasks.eagle3:Eagle3Task",
            exports={"hf": f"{_H}:EAGLE3", "vllm": f"{_V}:EAGLE3", "sglang": f"{_S}:EAGLE3", "gguf": f"{_G}:EAGLE3"},
            repo_suffix="eagle3",
            title="an EAGLE-3 drafter",
            tag="eagle3",
            paper="EAGLE-3 (Li et al. 2025)",
            crosscheck=("vllm", "llamacpp"),
            tiny_ref=f"{_X}:tiny_eagle3",
            bench=Bench(3.3, _WARMUP, (("eagle3_k3", 3, False), ("eagle3_tree16", 4, True))),
        ),
        # A causal LM + `pard_token`: vLLM serves it as draft_model with parallel_drafting (export/vllm.py).
        Kind(
            "pard",
            f"{_M}.pard:Pard",
            f"{_T}.tasks.pard:PardTrainConfig",
            f"{_T}.tasks.pard:PardTask",
            exports={"hf": f"{_H}:PARD", "vllm": f"{_V}:PARD"},
            repo_suffix="pard",
            title="a PARD parallel draft model",
            tag="pard",
            paper="PARD: parallel draft model adaptation (An et al. 2025, arXiv 2504.18583)",
            causal_lm=True,
            k_limit="pard_num_speculative_tokens",
            crosscheck=("vllm",),
            card_note="transformers' `assistant_model` drafts with this model one token at a time (no mask tokens): "
            "correct, but not PARD's one-forward drafting, which vLLM (`parallel_drafting`) and draftsmith run.",
            tiny_ref=f"{_X}:from_tiny_recipe",
            bench=Bench(1.4, _WARMUP, (("pard_k3", 3, False), ("pard_k7", 7, False))),
        ),
        # One forward fills a block of masks; vLLM: method "dflash" (also guessed from "dflash" in the name).
        Kind(
            "dflash",
            f"{_M}.dflash:DFlash",
            f"{_T}.tasks.dflash:DFlashTrainConfig",
            f"{_T}.tasks.dflash:DFlashTask",
            exports={"hf": f"{_H}:DFLASH", "vllm": f"{_V}:DFLASH", "sglang": f"{_S}:DFLASH"},
            repo_suffix="dflash",
            title="a DFlash block-diffusion drafter",
            tag="dflash",
            paper="DFlash: block diffusion for flash speculative decoding (z-lab 2026)",
            k_limit="num_speculative_tokens",
            crosscheck=("vllm",),
            tiny_ref=f"{_X}:from_tiny_recipe",
            bench=Bench(9.1, _WARMUP, (("dflash_k3", 3, False), ("dflash_k7", 7, False))),
        ),
        Kind(
            "prompt_lookup",
            f"{_M}.prompt_lookup:PromptLookup",
            title="prompt lookup",
            tag="prompt-lookup",
            paper="prompt lookup decoding (Saxena 2023)",
            tiny_ref=f"{_X}:tiny_prompt_lookup",
        ),
    )
}


def get_kind(name: str) -> Kind:
    if name not in KINDS:
        raise DraftsmithError(f"unknown drafter kind {name!r}; this version knows {', '.join(KINDS)}")
    return KINDS[name]


def drafter_configs() -> dict[str, type]:
    """kind -> its recipe `drafter:` dataclass, for the kinds that train (imports train/ on first use)."""
    return {k.name: k.config for k in KINDS.values() if k.config_ref is not None}


def kinds_with(engine: str, what: str = "crosscheck") -> tuple[str, ...]:
    """The kinds `draftsmith crosscheck` runs in `engine` (what="crosscheck") or that export to it
    (what="exports"): help texts and the engines tier read this, never a hand list."""
    return tuple(k.name for k in KINDS.values() if engine in getattr(k, what))


__all__ = ["KINDS", "Bench", "Kind", "drafter_configs", "get_kind", "kinds_with", "resolve"]
