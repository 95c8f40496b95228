"""The KV cache the engine decodes with: preallocated, rolled back by moving a length pointer.

It wraps a transformers `Cache` (what every `AutoModelForCausalLM` accepts as `cache=`) and
keeps the valid length on the host, so that rolling back after a rejection is bookkeeping, not
a device sync. Two layouts:

- "static": transformers' `StaticCache`, one buffer of `max_length` positions per layer; new
  keys are written at the layer's length pointer and stale entries beyond it are masked by
  causality until overwritten. Fixed shapes and addresses: what torch.compile / CUDA graphs
  need. Attention always spans `max_length` keys.
- "dynamic": transformers' `DynamicCache` (grows by concatenation; attention spans only the
  valid length). Kept as an option and tested to give the same logits; on this project's 2-core
  CPU the static layout was as fast or faster (SmolLM2 fp32, 200-token context, one decode
  step: static 100 ms, dynamic 108 ms), so the engine uses "static" everywhere.

Tree verification (infer/tree.py) writes a whole tree after the valid prefix and keeps
only the accepted path: `compact` gathers those positions down in one index op.

A model keeps its caches in a `CachePool`, one per length bucket, reset between requests rather
than made anew: transformers marks a new cache's tensors as static addresses, so a new cache per
request re-records every CUDA graph that reads it (and after enough re-records torch falls back
to eager without saying so). A reset cache holds what a new one holds (zeros), at the same
addresses.
"""

from __future__ import annotations

import functools
import inspect
import threading

import torch
from transformers import DynamicCache, StaticCache


@functools.cache
def _cache_argument(model_class: type) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` in current transformers,
    `past_key_values` up to 5.18 (the GPU image's 5.17). Passing the wrong one is silently
    ignored there (**kwargs), so it is looked up, never guessed."""
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class KVCache:
    def __init__(self, config, max_length: int, layout: str = "static"):
        if layout not in ("static", "dynamic"):
            raise ValueError(f"unknown cache layout {layout!r} (static|dynamic)")
        self.layout = layout
        self.config = config
        self.max_length = max_length
        self.length = 0
        self.hf = (
            StaticCache(config=config, max_cache_len=max_length) if layout == "static" else DynamicCache(config=config)
        )
        # Where transformers' own write pointers stand. A forward that writes the buffers itself
        # (models/fused.py) leaves them behind, and a static rollback only moves `length`: they
        # are set right before transformers' next forward (`sync`), not at every step.
        self.hf_length = 0

    def reset(self) -> None:
        """Empty, as a new cache of this size: static buffers zeroed in place (the addresses CUDA
        graphs captured stay valid), write pointers at 0."""
        if self.layout == "static":
            self.hf.reset()
        else:
            self.hf = DynamicCache(config=self.config)
        self.length = self.hf_length = 0

    def forward_kwargs(self, model) -> dict:
        """{keyword: transformers cache} for `model(...)`, whichever keyword this transformers uses,
        its write pointers at `length` (`sync`): every transformers forward over this cache takes
        its cache from here."""
        self.sync()
        return {_cache_argument(type(model)): self.hf}

    def advance(self, n: int, by_transformers: bool = True) -> None:
        """Record that a forward wrote n more positions (`by_transformers`: transformers' forward,
        which advanced its own pointers; else a forward that wrote the buffers itself)."""
        self.length += n
        if by_transformers:
            self.hf_length = self.length
        if self.length > self.max_length:
            raise RuntimeError(f"KV cache overflow: {self.length} > {self.max_length} positions")

    def sync(self) -> None:
        """Set transformers' write pointers to `length` before its forward: a static layer
        writes its new keys at its pointer (in place: CUDA graphs keep its address)."""
        if self.layout == "static" and self.hf_length != self.length:
            for layer in self.hf.layers:
                layer.cumulative_length.fill_(self.length)
            self.hf_length = self.length

    def buffers(self, like: torch.Tensor, num_kv_heads: int, head_dim: int) -> list:
        """The static layers, their key/value buffers allocated (in `like`'s dtype and device)
        for a forward that writes them itself."""
        if self.layout != "static":
            raise ValueError("only a static cache has buffers to write in place")
        layers = self.hf.layers
        if not layers[-1].is_initialized:  # a forward initialises every layer: checked once
            empty = like.new_empty(1, num_kv_heads, 1, head_dim)
            for layer in layers:
                if not layer.is_initialized:
                    layer.lazy_initialization(empty, empty)
        return layers

    def kv_length(self, q: int) -> int:
        """Keys a forward of q new tokens attends over: what a 4D attention mask must span."""
        return self.max_length if self.layout == "static" else self.length + q

    def crop(self, new_length: int) -> None:
        """Roll back to the first `new_length` positions (e.g. drop rejected draft tokens)."""
        if new_length > self.length or new_length < 0:
            raise ValueError(f"cannot crop a cache of length {self.length} to {new_length}")
        if new_length < self.length:
            # A static layer's stale entries stay until overwritten (attention never reads past
            # `length`); its write pointer is set by `sync` before transformers' next forward. A
            # dynamic cache slices now (transformers' crop of a negative count: a view, no copy).
            if self.layout == "dynamic":
                self.hf.crop(new_length - self.length)
                self.hf_length = new_length
            self.length = new_length

    def compact(self, start: int, keep: torch.Tensor) -> None:
        """Keep positions `keep` (absolute, ascending, all >= start) at start, start+1, ...; drop the rest.

        One gather per layer: how a verified tree keeps only its accepted path.
        """
        m = int(keep.shape[0])
        for layer in self.hf.layers:
            for name in ("keys", "values"):
                buf = getattr(layer, name)
                kept = buf.index_select(2, keep.to(buf.device))
                if self.layout == "static":
                    buf[:, :, start : start + m] = kept
                else:
                    setattr(layer, name, torch.cat([buf[:, :, :start], kept], dim=2))
        if self.layout == "static":
            self.crop(start + m)
        else:
            self.length = self.hf_length = start + m  # dynamic layers derive their length from the tensors


class CachePool:
    """A model's caches, one per (thread, max_length, layout), reused across requests: `get` hands back
    the cache of that length, reset, or makes one. At most `keep` are held (the least recently
    used goes first): compiled models see a few length buckets; an eager one gains nothing from
    keeping lengths that vary per prompt. Per thread: a cache is in use until its owner's next
    request, and two threads decoding with one model must not share one."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self._caches: dict[tuple[int, int, str], KVCache] = {}

    def get(self, max_length: int, make, layout: str = "static") -> KVCache:
        key = (threading.get_ident(), max_length, layout)
        cache = self._caches.pop(key, None)
        if cache is None:
            cache = make()
        else:
            cache.reset()
        self._caches[key] = cache  # now the most recently used
        while len(self._caches) > max(self.keep, 1):
            del self._caches[next(iter(self._caches))]
        return cache
