"""The target model: any `AutoModelForCausalLM`, frozen, behind the small surface the engine uses.

Accepts everything `models.sources.resolve_model` does: a built-in name, a local folder, a
`.gguf` file or a Hub id. It decodes into a static, preallocated cache on every device; on CUDA
the small decode/verify forwards are also torch.compile'd (CUDA graphs), on CPU they run eagerly
(compiling gains ~5% per decode step there, after ~30 s of compiling).
"""

from __future__ import annotations

import contextlib
import logging

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer.cache import CachePool, KVCache
from draftsmith.infer.hardware import auto_dtype, use_affinity_threads

from .capture import HiddenCapture
from .fused import FusedForward, LazyFused
from .placement import load_split_causal_lm, placement_of, plan_device_map
from .sources import load_causal_lm, load_tokenizer, resolve_model

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FORWARDS = ("auto", "fused", "transformers")  # the target's eager forward (Target.fused_forward)


def parse_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise DraftsmithError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def last_rows(keep: int, q: int, device) -> torch.Tensor | int:
    """transformers' `logits_to_keep` for the last `keep` of q positions, as row indices.

    An int makes transformers slice `hidden[:, -keep:, :]`: a view whose batch stride is still
    q·d. torch 2.13's CPU bf16 linear takes a slow path on such 3-D inputs: the LM head of
    Qwen2.5-0.5B (151,936 × 896) costs ~700 ms instead of ~20 ms for q >= 2, which made
    DraftLM.propose 2-8x dearer inside the loop than alone (issue 17). Indices make it gather
    the rows into a fresh tensor (standard strides), fast on every dtype. 0 (all rows) stays 0.
    """
    if keep <= 0 or keep >= q:
        return 0
    return torch.arange(q - keep, q, device=device)


def compile_decode(forward):
    """`forward` compiled for decoding: CUDA graphs, one per input shape (dynamic=False). For the
    few fixed shapes of decode/verify/drafting steps over a static cache, never for prefill.

    A drafter compiles one graph per query count (up to k+1) and per tree level, and EAGLE-1 and
    EAGLE-3 share one function: dynamo's default of 8 graphs per function would silently send
    the rest back to eager, so the limit is raised (each graph is still one fixed shape)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(forward, mode="reduce-overhead", dynamic=False)


def check_device(name) -> torch.device:
    """A device that exists here, or one line saying why `--device name` does not."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise DraftsmithError(
            f"--device {name!r}: not a device name torch knows; use cpu, cuda or cuda:N (or leave it out)"
        ) from None
    backend = getattr(torch, device.type, None)
    available = getattr(backend, "is_available", None)
    if device.type != "cpu" and (available is None or not available()):
        why = "this torch was built without CUDA" if device.type == "cuda" and not torch.version.cuda else "none here"
        raise DraftsmithError(
            f"--device {name}: no {device.type} device is available ({why}; torch {torch.__version__}); "
            "use --device cpu or leave --device out"
        )
    count = getattr(backend, "device_count", None)
    if device.index is not None and device.type != "cpu" and count is not None and device.index >= count():
        raise DraftsmithError(f"--device {name}: there are {count()} {device.type} devices (0..{count() - 1})")
    return device


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def eos_ids(model, tokenizer) -> set[int]:
    """Every id that ends generation: the generation config's (int or list) and the tokenizer's."""
    ids = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for src in (gen_eos, tokenizer.eos_token_id if tokenizer is not None else None):
        if src is None:
            continue
        ids.update([src] if isinstance(src, int) else src)
    return ids


class Target:
    def __init__(self, model, tokenizer, name: str, source=None, compile: bool | None = None):
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.config = model.config
        # the embedding, not the first parameter: a readers-only target's layers are on meta
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.get_input_embeddings().weight.dtype
        self.parts = "readers" if getattr(model, "feature_readers_only", False) else "whole"
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.eos_token_ids = eos_ids(model, tokenizer)
        self.note: str | None = None  # what a report should say about it (e.g. fine-tuned by Medusa-2)
        self.dtype_reason: str | None = None  # why it runs in its dtype (Target.load: "auto"'s choice)
        self.cpu_matmul: dict | None = None  # the few-row matmul chosen per model (use_cpu_matmul)
        # None on one device; over several (a device map): devices, layers per device, the speed
        # caveat (models/placement.py), for every report to state
        self.placement: dict | None = placement_of(model) if self.parts == "whole" else None
        on_cuda = self.device.type == "cuda"
        self.cache_layout = "static"
        self._forward = model.forward
        # Not compiled by default when split: CUDA graphs capture one device's work, and
        # accelerate's per-layer hooks move tensors between GPUs inside the forward.
        self.compiled = bool(compile if compile is not None else on_cuda and self.placement is None)
        if self.compiled:
            # Decode/verify shapes are few and fixed (q = 1 and q = k+1) with a static cache:
            # what CUDA graphs need. Prefill stays eager (see forward()).
            self._forward = compile_decode(model.forward)
        # Hooks on the layers a drafter reads (models/capture.py); a compiled forward keeps
        # transformers' `output_hidden_states`, which its graphs were traced with.
        self._capture = HiddenCapture.of(model) if self.parts == "whole" and not self.compiled else None
        # The eager forward: models/fused.py's where it supports the model ("auto" and "fused"),
        # else transformers'. Built at the first forward that uses it (a trainer may wrap the
        # model's layers before then, e.g. Medusa-2's LoRA, which keeps transformers' forward).
        self.forward_impl = "auto"
        self._fused = LazyFused()

    @classmethod
    def load(
        cls,
        name_or_path: str,
        dtype="float32",
        device=None,
        compile: bool | None = None,
        parts: str = "whole",
        device_map: str | dict | None = None,
        forward: str = "auto",
    ) -> Target:
        """dtype "auto": what the machine runs fastest (infer/hardware.py: bf16 on CUDA, and on a
        CPU with AMX/AVX512-BF16 where measured faster; else fp32). On CPU torch's threads are set
        to the cores this process may use. parts "readers": only the embedding, final norm and LM
        head (models/readers.py), for training from a feature cache; the target cannot decode.

        device_map: "auto" (the fewest GPUs that hold it) or "balanced" (all visible GPUs) spread
        the decoder layers over the GPUs (models/placement.py); a dict of module name -> device is
        used as given. Without one, device "cuda" spreads a target whose weights exceed the GPU's
        free memory in the same way. `target.placement` then says where it went.

        forward: the eager forward, "auto" (models/fused.py's on CPU where the model is
        supported, else transformers'), "fused" (wherever supported) or "transformers"."""
        if forward not in FORWARDS:  # before loading anything
            raise DraftsmithError(f"unknown target forward {forward!r}: choose one of {', '.join(FORWARDS)}")
        device = check_device(device) if device is not None else default_device()
        reason = None
        if dtype == "auto":
            dtype, reason = auto_dtype(device)
        if device.type == "cpu":
            use_affinity_threads()
        source = resolve_model(name_or_path)
        tokenizer = load_tokenizer(name_or_path)
        if parts == "readers":
            if device_map is not None:
                raise DraftsmithError(
                    "device_map: a readers-only target (embedding, norm, LM head) loads on one device"
                )
            from .readers import load_feature_readers

            model = load_feature_readers(name_or_path, dtype=parse_dtype(dtype), device=device)
            compile = False
        else:
            device, device_map = plan_device_map(name_or_path, parse_dtype(dtype), device, device_map)
            if device_map is None:
                model = load_causal_lm(name_or_path, dtype=parse_dtype(dtype), device=device)
            else:
                model = load_split_causal_lm(name_or_path, parse_dtype(dtype), device_map)
        target = cls(model, tokenizer, name_or_path, source, compile=compile)
        target.forward_impl = forward
        target.dtype_reason = reason or "asked for"
        if target.placement is not None:
            p = target.placement
            log.info("target %s over %s (decoder layers %s); %s", name_or_path, ", ".join(p["devices"]),
                     ", ".join(f"{d}: {n}" for d, n in p["layers_per_device"].items()), p["caveat"])  # fmt: skip
        log.info("target %s in %s (%s)%s", name_or_path, dtype, target.dtype_reason,
                 ": embedding, final norm and LM head only" if parts == "readers" else "")  # fmt: skip
        return target

    @property
    def forward_impl(self) -> str:
        """The eager forward asked for: one of FORWARDS (see `fused_forward`)."""
        return self._forward_impl

    @forward_impl.setter
    def forward_impl(self, name: str) -> None:
        if name not in FORWARDS:
            raise DraftsmithError(f"unknown target forward {name!r}: choose one of {', '.join(FORWARDS)}")
        self._forward_impl = name

    def _kept_on_transformers(self) -> str | None:
        """Why the target keeps transformers' forward whatever the model (None: it may fuse)."""
        if self.forward_impl == "transformers":
            return "asked for"
        if self.compiled or self.parts != "whole" or self.placement:
            return "compiled, split over devices or feature readers only"
        if self.forward_impl == "auto" and self.device.type != "cpu":
            return f"{self.device.type}: compiled or eager, fused only on CPU by default"
        return None

    def fused_forward(self) -> FusedForward | None:
        """The fused forward the target decodes with, or None for transformers' forward: always
        when compiled (the graphs are traced over transformers' forward), split over devices or
        only the feature readers, or when `forward_impl` is "transformers"; "auto" takes it on
        CPU, "fused" on any device; where the model is not supported, see `forward_why`. Called
        at every forward: a model found unsupported is not examined again."""
        if self._kept_on_transformers() is not None:
            return None
        return self._fused.get(self.model)

    @property
    def forward_why(self) -> str:
        """Which forward the target decodes with, and why (every report records it)."""
        return self._fused.describe(self.model, self._kept_on_transformers())

    def linear_modules(self) -> torch.nn.Module:
        """The modules holding every linear the target's forward calls, for a CPU matmul kernel
        to route (infer/kernels.py): the fused forward's own fused projections (not the
        per-projection modules it leaves unused, whose packed copies would only take memory),
        else the model."""
        fused = self.fused_forward()
        return fused.linears if fused is not None else self.model

    def use_cpu_matmul(self, choice: str, rows: int, drafter=None, draft_dtype: str = "auto") -> dict:
        """Route the target's (and the drafter's model's) few-row matmuls through `choice`
        (infer/kernels.py: "auto" measures the candidates at `rows` rows and at one row on this
        machine and keeps the fastest at each, for each layer weight shape and for the LM head:
        `choose_by_shape`), and run a draft that needs
        no target features in `draft_dtype` ("auto": bfloat16 where its one-row product measured
        faster); -> the choices and why, which every report records."""
        from draftsmith.infer.kernels import (
            choose_by_shape,
            choose_draft_dtype,
            output_head,
            route_as_chosen,
            use_linear_kernel,
        )

        chosen = {}
        draft = drafter.own_model() if drafter is not None else None
        shared = draft is not None and bool(  # a draft made of the target's own tensors
            {p.data_ptr() for p in draft.parameters()} & {p.data_ptr() for p in self.model.parameters()}
        )
        if draft is not None and not drafter.needs_hidden_states and not shared:
            if draft_dtype == "auto":
                dtype, why, timings = choose_draft_dtype(draft, self.device)
            else:
                dtype, why, timings = parse_dtype(draft_dtype), "asked for", None
            draft.to(dtype)
            chosen["draft_dtype"] = {"dtype": str(dtype).removeprefix("torch."), "why": why, "timings": timings}
        for role, model in (("target", self.model), ("draft", draft)):
            if model is None:
                continue
            routed = self.linear_modules() if role == "target" else drafter.linear_modules()
            if choice == "auto":  # each weight shape, and the LM head, on its own measured kernels
                chosen[role] = choose_by_shape(model, routed, rows, self.device)
                route_as_chosen(routed, chosen[role], output_head(model, routed))
            else:
                use_linear_kernel(routed, choice)
                chosen[role] = {"kernel": choice, "one_row": None, "why": "asked for", "rows": rows, "timings": None}
                chosen[role]["prompt_rows"] = False
        self.cpu_matmul = chosen
        return chosen

    def new_cache(self, max_length: int) -> KVCache:
        """An empty cache of `max_length` positions: this model's cache of that length, reset, if
        it has one (the graphs captured over its tensors replay), else a new one."""
        pool = self.__dict__.get("_cache_pool")
        if pool is None:  # compiled: a few length buckets; eager: lengths vary, keep the last
            pool = self.__dict__["_cache_pool"] = CachePool(keep=4 if self.compiled else 1)
        layout = self.cache_layout
        return pool.get(max_length, lambda: KVCache(self.config, max_length, layout), layout)

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """Logits [q, V] (or the last `logits_to_keep` rows) for input_ids [1, q] after `cache`.

        Positions default to the cache's valid length onwards; a tree passes its own positions
        and a 4D attention mask (transformers uses a 4D mask as given).
        """
        return self.forward_hidden(input_ids, cache, position_ids, attention_mask, logits_to_keep)[0]

    def forward_hidden(
        self,
        input_ids: torch.Tensor,
        cache: KVCache,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        logits_to_keep: int = 0,
        hidden_layers: tuple[int, ...] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """forward() plus, with `hidden_layers`, the hidden states a drafter reads: [q, len*d],
        the chosen entries of transformers' `hidden_states` tuple (0: embeddings, -1: the last
        layer after the final norm, i.e. the LM head's input) concatenated on the last dim, for
        every input position whatever `logits_to_keep` says."""
        q = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(cache.length, cache.length + q, device=input_ids.device).unsqueeze(0)
        fused = self.fused_forward() if cache.layout == "static" else None
        if fused is not None:
            keep = last_rows(logits_to_keep, q, input_ids.device)
            n = len(fused.layers) + 1
            if hidden_layers and not all(-n <= i < n for i in hidden_layers):
                self._no_such_layers(hidden_layers, n)
            logits, hidden = fused(input_ids, cache, position_ids, attention_mask, keep, hidden_layers)
            cache.advance(q, by_transformers=False)
            return logits, hidden
        # Only decode/verify forwards (all logits kept) take the compiled path: prefill shapes vary
        # with every prompt and would recompile.
        fwd = self._forward if logits_to_keep == 0 and cache.layout == "static" else self.model.forward
        keep = last_rows(logits_to_keep, q, input_ids.device)
        capture = self._capture if hidden_layers else None
        if capture is not None and not all(-capture.num_states <= i < capture.num_states for i in hidden_layers):
            self._no_such_layers(hidden_layers, capture.num_states)
        with capture.collect(hidden_layers) if capture else contextlib.nullcontext() as caught:
            out = fwd(
                input_ids=input_ids,
                **cache.forward_kwargs(self.model),
                position_ids=position_ids,
                attention_mask=attention_mask,
                use_cache=True,
                logits_to_keep=keep,
                output_hidden_states=bool(hidden_layers) and capture is None,
            )
        cache.advance(q)
        # A target split over devices (a device map) returns each hidden state on its layer's
        # device; the engine and the drafter work on the embedding's (self.device): moved there
        # (no-ops on one device). The logits already are: the LM head sits with the embedding
        # (models/placement.py), but a map given as a dict may place it elsewhere.
        hidden = None
        if hidden_layers:
            states = caught if capture else out.hidden_states
            if capture is None and not all(-len(states) <= i < len(states) for i in hidden_layers):
                self._no_such_layers(hidden_layers, len(states))
            hidden = torch.cat([states[i][0].to(self.device) for i in hidden_layers], dim=-1)
        return out.logits[0].to(self.device), hidden

    def _no_such_layers(self, hidden_layers, n: int):
        raise DraftsmithError(
            f"the drafter reads hidden layers {list(hidden_layers)} but {self.name} has "
            f"{n} hidden states (indices {-n}..{n - 1})"
        )
