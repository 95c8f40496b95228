"""The transformers anchors of `draftsmith bench`: `generate()` (hf_plain) and
`generate(assistant_model=draft)` (hf_assisted) on the same prompts as our runtime.

Where our target runs compiled (always on CUDA, on CPU with `--compile on`) the anchors take
transformers' own fast path: a static cache and the automatic compile of the target's decode
forward (`compile_config`: transformers' default CompileConfig, reduce-overhead, i.e. CUDA
graphs on CUDA; off CUDA transformers compiles only when the config says
`_compile_all_devices`). The static cache is one transformers StaticCache per target, sized once
for the longest prompt plus max_new_tokens and reset before each request, as our runtime reuses
its cache buffers: `cache_implementation="static"` would allocate a new one per generate() call,
and CUDA graphs re-record over every new address (torch's cudagraph_trees, a static input whose
address changed). One cache length also means one compiled graph for every prompt.

Assisted generation keeps the target on that path (generation/utils.py `_assisted_decoding`
compiles the verify forward under `_valid_auto_compile_criteria`; cache_utils.py
`StaticLayer.is_croppable = True`), while the draft always decodes eagerly over its own dynamic
cache (candidate_generator.py sets the assistant's `cache_implementation` and `compile_config`
to None). Otherwise the anchors run eager over a DynamicCache, as our eager runtime does.
"""

from __future__ import annotations

import dataclasses
import time
import weakref

import torch

from draftsmith.infer.engine import CACHE_BUCKET
from draftsmith.infer.sampling import SamplingConfig


@dataclasses.dataclass(frozen=True)
class Anchor:
    """How a transformers anchor decodes: its target's cache ("static" or "dynamic") and whether
    transformers compiles the target's decode forward; for hf_assisted, the draft's too."""

    cache: str = "dynamic"
    compiled: bool = False
    max_cache_len: int | None = None
    draft_cache: str | None = None  # hf_assisted only
    draft_compiled: bool | None = None

    def generate_kwargs(self, model) -> dict:
        """What generate() is given on top of the decoding options (a static cache: this
        target's one StaticCache, which hf_generate resets before the request)."""
        if self.cache != "static":
            return {}
        kwargs = {"cache": static_cache(model, self.max_cache_len)}
        if self.compiled:
            kwargs["compile_config"] = _compile_config(model.device.type)
        else:  # a static cache alone: transformers would compile it on CUDA unasked
            kwargs["disable_compile"] = True
        return kwargs

    def as_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {max_cache_len: StaticCache}
_COMPILE_CONFIGS: dict[str, object] = {}


def static_cache(model, max_cache_len: int):
    """The model's StaticCache of max_cache_len positions, made once: the compiled forward's
    CUDA graphs read its tensors in place, so they replay for every request."""
    caches = _CACHES.setdefault(model, {})
    if max_cache_len not in caches:
        from transformers import StaticCache

        caches[max_cache_len] = StaticCache(
            config=model.config.get_text_config(decoder=True), max_cache_len=max_cache_len
        )
    return caches[max_cache_len]


def _compile_config(device_type: str):
    """transformers' default CompileConfig, one instance per device type: generate() compiles
    again when handed a config unequal to the last one."""
    if device_type not in _COMPILE_CONFIGS:
        from transformers import CompileConfig

        config = CompileConfig()
        if device_type != "cuda":  # transformers' switch to compile on devices it skips by default
            config._compile_all_devices = True
        _COMPILE_CONFIGS[device_type] = config
    return _COMPILE_CONFIGS[device_type]


def anchors(target, prompts, max_new_tokens: int, fast: bool | None = None) -> dict[str, Anchor]:
    """{"hf_plain": Anchor, "hf_assisted": Anchor}. fast (default: whether our target runs
    compiled): static cache + compiled forward, the cache sized once for the longest prompt plus
    max_new_tokens, rounded up to our runtime's cache bucket."""
    if fast is None:
        fast = bool(getattr(target, "compiled", False))
    if not fast:
        return {"hf_plain": Anchor(), "hf_assisted": Anchor(draft_cache="dynamic", draft_compiled=False)}
    longest = max(len(p.ids) for p in prompts) + max_new_tokens + 1
    length = -(-longest // CACHE_BUCKET) * CACHE_BUCKET
    plain = Anchor("static", True, length)
    return {"hf_plain": plain, "hf_assisted": dataclasses.replace(plain, draft_cache="dynamic", draft_compiled=False)}


def hf_generate(
    model, ids, max_new_tokens, sampling: SamplingConfig, eos, pad, seed, assistant=None, anchor: Anchor | None = None
):
    """One transformers generate() call, timed; returns (new token ids, seconds)."""
    kwargs = dict(
        max_new_tokens=max_new_tokens, eos_token_id=sorted(eos), pad_token_id=pad, do_sample=not sampling.greedy
    )
    if sampling.greedy:
        kwargs.update(temperature=None, top_k=None, top_p=None)
    else:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    if anchor is not None:
        kwargs.update(anchor.generate_kwargs(model))
    inp = torch.tensor([ids], device=model.device)
    torch.manual_seed(seed)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.inference_mode():
        if "cache" in kwargs:  # the reused static cache starts empty, in place
            kwargs["cache"].reset()
        out = model.generate(inp, attention_mask=torch.ones_like(inp), **kwargs)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, inp.shape[1] :].tolist(), time.perf_counter() - t


def configure_hf_assistant(draft_model, k: int) -> None:
    """Constant K, no confidence cut-off: the fair classic-speculative baseline in transformers."""
    gc = draft_model.generation_config
    gc.num_assistant_tokens = k
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0


def warm_up_assisted(model, assistant, ids, k: int, max_new_tokens, sampling, eos, pad, seed, anchor: Anchor) -> None:
    """Compile every verify shape of a compiled hf_assisted before the timing: its target sees
    1 + the drafted count per round, K in full rounds and fewer in the last ones, so a short
    generation drafting j tokens a round runs each j of 0..K (the first round, the prefill, is
    eager); never longer than the bench's generations, so the cache keeps its one size. The
    draft's K is restored after."""
    if not anchor.compiled:
        return
    try:
        for j in range(k + 1):
            configure_hf_assistant(assistant, j)
            hf_generate(model, ids, min(3 * (j + 1) + 1, max_new_tokens), sampling, eos, pad, seed, assistant, anchor)
    finally:
        configure_hf_assistant(assistant, k)


def anchors_line(baselines: dict) -> str:
    """One line of what each transformers anchor ran, e.g.
    `transformers anchors: hf_plain static cache, compiled; hf_assisted ...`."""

    def one(name, a):
        text = f"{name} {a['cache']} cache, {'compiled' if a['compiled'] else 'eager'}"
        if a.get("draft_cache"):
            text += f" (draft: {a['draft_cache']} cache, {'compiled' if a.get('draft_compiled') else 'eager'})"
        return text

    return "transformers anchors: " + "; ".join(one(n, a) for n, a in baselines.items())
