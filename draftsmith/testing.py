"""Tiny instances of every drafter kind, for the contract suite (tests/test_contract.py).

Each registry entry names its factory (`Kind.tiny_ref`): a function `(kind, target, folder)` that
builds a small drafter of that kind for the built-in `tiny-random` target, writes it to `folder`
as a checkpoint the way the trainer does (or writes nothing, for a kind without weights) and
returns `(drafter, spec)`: the drafter in memory and the `--draft` value that loads it again. The
contracts (greedy output equals plain decoding, sampled output follows the target's law,
save and reload, the cap on K, fixed compiled shapes) hold for any weights, so the factories do
not train: their weights are the kind's own initialisation under a fixed seed.

A trained kind's factory is usually `from_tiny_recipe`: the drafter section of the kind's smoke
recipe (configs/tiny/<kind>.yaml) through the kind's own training task, so a new kind is covered
by declaring `tiny_ref="draftsmith.testing:from_tiny_recipe"`. Torch, the models and the trainer
are imported on first use: importing this module costs nothing.
"""

from __future__ import annotations

import os
import pathlib

SEED = 0


def configs_dir() -> pathlib.Path:
    """The recipes folder beside the installed package (the repository's configs/)."""
    here = pathlib.Path(__file__).resolve().parent
    return pathlib.Path(os.environ.get("DRAFTSMITH_CONFIGS", here.parent / "configs"))


def tiny_task(kind, target, **overrides):
    """The kind's training task for its smoke recipe's `drafter:` section (plus `overrides`),
    seeded, untrained."""
    import torch

    from draftsmith.train.config import load_recipe

    recipe = load_recipe(
        configs_dir() / "tiny" / f"{kind.name}.yaml", {f"drafter.{k}": v for k, v in overrides.items()}
    )
    torch.manual_seed(SEED)
    return kind.task(recipe.drafter, target, seed=SEED)


def save_task(task, folder) -> tuple[object, str]:
    """Write the task's model as a checkpoint in `folder` -> (its runtime drafter, the folder)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    task.model.eval()
    task.save(task.model, None, folder, {"step": 0})
    drafter = task.runtime_drafter(task.model)
    drafter.model.requires_grad_(False)
    return drafter, str(folder)


def from_tiny_recipe(kind, target, folder):
    """Any trained kind: its smoke recipe's drafter through its task, untrained, saved."""
    return save_task(tiny_task(kind, target), folder)


def tiny_eagle3(kind, target, folder):
    """EAGLE-3 picks its draft vocabulary from the training data (`bind_data`); here a seeded
    random subset of the target's vocabulary stands in for it."""
    import torch

    task = tiny_task(kind, target)
    size = task.model.config.draft_vocab_size
    ids = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(SEED))[:size].sort().values
    task.model.set_vocab(ids, target.model.get_output_embeddings())
    task._vocab_set = True
    return save_task(task, folder)


def tiny_prompt_lookup(kind, target, folder):
    """No weights and no checkpoint: the `--draft` spec is the whole drafter."""
    spec = f"{kind.name}:3"
    return kind.drafter(max_ngram=3), spec


def __getattr__(name: str):
    """`Forced`, built on first use: it subclasses the runtime's drafter contract, and importing
    the runtime here would make importing this module cost torch."""
    if name != "Forced":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import itertools

    import torch

    from draftsmith.infer.proposal import Proposal, WrappedDrafter

    class Forced(WrappedDrafter):
        """A drafter whose first n tokens are the target's own continuation (`reference`), n
        cycling 0..k: the engine then keeps 0..k drafts, so the real drafter underneath (whose
        propose() runs in full every step) catches up on every row count it can meet. Chains only."""

        def __init__(self, inner, reference: list[int], prompt_len: int, k: int):
            super().__init__(inner)
            self.reference, self.prompt_len = reference, prompt_len
            self.counts = itertools.cycle(range(k + 1))

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def propose(self, seq, k, sampling, generator=None, tree=None):
            p = self.inner.propose(seq, k, sampling, generator, tree)
            at = seq.shape[1] - self.prompt_len
            n = min(next(self.counts), len(p.tokens))
            tokens = p.tokens.clone()
            tokens[:n] = torch.tensor(self.reference[at : at + n], device=tokens.device)
            return Proposal(tokens, p.probs, tree=p.tree)

    globals()["Forced"] = Forced
    return Forced


def stub_vllm(ckpt, target, *, off_by_one: bool = False, started: list | None = None):
    """A stand-in for draftsmith.shipping.engines.vllm_engine.VLLMEngine (where vLLM is not
    installed) that decodes with draftsmith's own runtime, the checkpoint's drafter when given a
    draft: it agrees with our runtime, unless `off_by_one` makes it report one draft too many per
    prompt. Monkeypatch it over `vllm_engine.VLLMEngine` (and `engines.resolve_vllm` with
    `stub_vllm_install`). `started` collects what each engine was started with (its keyword
    arguments: `draft_dir`, the resolved `vllm` install, `dtype`, `parallel`, ...)."""
    from draftsmith.models import load_drafter
    from draftsmith.shipping.crosscheck import OurRuntime

    class StubVLLM:
        def __init__(self, target_dir, *, draft_dir=None, num_speculative_tokens=None, **kwargs):
            drafter = load_drafter(str(ckpt), target) if draft_dir is not None else None
            self.runtime = OurRuntime(target, drafter, num_speculative_tokens or 3)
            self.versions, self.load_s = {"vllm": "0.0-stub", "torch": "stub"}, 0.0
            self.draft = draft_dir is not None
            self.options = kwargs  # what crosscheck passed (dtype, parallelism): tests read it
            if started is not None:
                started.append({"draft_dir": draft_dir, **kwargs})

        def generate(self, prompt_ids, max_tokens, stop_ids=()):
            out = self.runtime.generate(prompt_ids, max_tokens)
            out.drafts += int(off_by_one and self.draft)
            return out

        def close(self):
            pass

    return StubVLLM


def stub_vllm_install(folder, chosen: list | None = None):
    """A stand-in for draftsmith.shipping.installs.resolve_vllm: a named choice (a --vllm PATH)
    resolves to a vLLM whose python is that path, no choice to one "installed" in `folder`; none
    is checked or run (stub_vllm decodes). `chosen` collects the choices (--vllm values) it was
    asked for."""
    import pathlib

    from draftsmith.shipping.installs import VLLMInstall

    def resolve(choice=None):
        if isinstance(choice, VLLMInstall):
            return choice
        if chosen is not None:
            chosen.append(choice)
        if choice is not None and str(choice).strip():
            python = pathlib.Path(str(choice).strip())
            return VLLMInstall(python, python.parent.parent, "0.0-stub", "vllm", "--vllm")
        return VLLMInstall(pathlib.Path(folder) / "bin" / "python", pathlib.Path(folder), "0.0-stub", "vllm", "stub")

    return resolve


def tiny_drafter(kind, target, folder):
    """The kind's declared factory, called -> (drafter, the `--draft` value that reloads it)."""
    from draftsmith.errors import DraftsmithError
    from draftsmith.kinds import resolve

    if not kind.tiny_ref:
        raise DraftsmithError(f"kind {kind.name!r} declares no tiny_ref: the contract suite cannot build it")
    return resolve(kind.tiny_ref)(kind, target, folder)


__all__ = [  # and Forced, built on first use (module __getattr__)
    "configs_dir",
    "from_tiny_recipe",
    "save_task",
    "stub_vllm",
    "stub_vllm_install",
    "tiny_drafter",
    "tiny_eagle3",
    "tiny_prompt_lookup",
]
