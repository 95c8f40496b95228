"""A decode forward for Llama-family targets with fewer, larger operator calls.

A small target decodes one token per step through ~200 operators per decoder layer in
transformers' modules (the mask and rotary bookkeeping, the attention interface, the cache's
index copies, kwargs plumbing), and at batch 1 on a CPU each call costs microseconds whatever
its size: on SmolLM2-135M (30 layers, 2 cores) a plain step issued ~5,500 operator calls
against vLLM-CPU's ~1,380, and a quarter of the step was spent outside any operator. This
forward computes the same function the way gpt-fast writes it: one fused q/k/v projection and
one fused gate/up projection per layer (vLLM's QKVParallelLinear and MergedColumnParallelLinear
do the same), RoPE as two multiplies and a roll, the keys and values written into the cache's
buffers by one slice copy each, and attention over the valid prefix only (not the full width of
a static cache behind a mask).

It reads the model's own modules and weights: the fused q/k/v and gate/up weights are made once
and the original projections' weights become views into them, so the tensors do not grow and an
in-place change of either is seen by both (a checkpoint loaded memory-mapped from disk keeps the
originals' read pages resident until the kernel reclaims them: 15.2 GiB against 12.0 GiB for
Qwen2.5-Coder-1.5B in fp32 with oneDNN's packed copies, docs/results.md). Every product is
routed as its module's forward routes it (infer/kernels.py `rows_linear`), so the CPU matmul
kernel chosen for the target applies here too.

Supported: the `llama`, `mistral`, `qwen2` and `qwen3` model types with full attention (no
sliding window) and plain `nn.Linear` projections (a peft-wrapped model keeps transformers'
forward). `why_not_fused` says why a model is not taken; the target then runs transformers'
forward, which gives the same logits up to summation order (tests/test_fused.py).

RoPE: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021), in
transformers' half-split layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from draftsmith.infer.kernels import routing_generation, rows_linear

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
GROUPED_ROWS = 64  # forwards of at most this many rows (decode, verify, trees) attend per kv head


def why_not_fused(model) -> str | None:
    """None if `FusedForward` computes this model's forward, else why not (one phrase)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_TYPES:
        return f"model type {model_type!r} (fused: {', '.join(MODEL_TYPES)})"
    decoder = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, p) for p in parts):
        return "the decoder's modules are not where transformers puts them"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "sliding-window layers"
    if model_type == "mistral" and getattr(config, "sliding_window", None) is not None:
        return "sliding-window attention"
    linears = [model.get_output_embeddings()]
    for layer in decoder.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not callable(getattr(mlp, "act_fn", None)):
            return "a decoder layer without transformers' self_attn/mlp"
        linears += [getattr(attn, n, None) for n in PROJECTIONS] + [getattr(mlp, n, None) for n in MLP]
        if model_type == "qwen3" and not (hasattr(attn, "q_norm") and hasattr(attn, "k_norm")):
            return "a qwen3 layer without q_norm/k_norm"
    if any(type(m) is not torch.nn.Linear for m in linears):
        return "a projection that is not a plain nn.Linear (an adapter or a quantized layer)"
    if any(p.device.type == "meta" for p in model.parameters()):
        return "weights on the meta device"
    return None


def _joined(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensors as one, without a copy, where they already lie end to end in one storage in
    this order (a model fused before, whose projections are views of the fused weight); else None."""
    first = tensors[0]
    at, storage = first.data_ptr(), first.untyped_storage().data_ptr()
    for t in tensors:
        if not t.is_contiguous() or t.untyped_storage().data_ptr() != storage or t.data_ptr() != at:
            return None
        at += t.numel() * t.element_size()
    shape = (sum(t.shape[0] for t in tensors), *first.shape[1:])
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), shape)


def _concat(tensors: list[torch.Tensor]) -> torch.Tensor:
    tensors = [t.detach() for t in tensors]
    joined = _joined(tensors)
    return joined if joined is not None else torch.cat(tensors)


def _fuse(modules: list[torch.nn.Linear]) -> torch.nn.Linear:
    """One nn.Linear whose output is the modules' outputs concatenated; each module's weight
    (and bias) becomes a view into the fused one, so no memory is added. Fusing a model twice
    (the target and a draft sharing it, or a rebuild) finds the views and copies nothing, so
    neither build moves the other's weights."""
    weight = _concat([m.weight for m in modules])
    has_bias = modules[0].bias is not None
    fused = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=has_bias, device="meta")
    fused.weight = torch.nn.Parameter(weight, requires_grad=False)
    if has_bias:
        fused.bias = torch.nn.Parameter(_concat([m.bias for m in modules]), requires_grad=False)
    at = 0
    for m in modules:
        n = m.weight.shape[0]
        m.weight.data = fused.weight.data[at : at + n]
        if has_bias:
            m.bias.data = fused.bias.data[at : at + n]
        at += n
    return fused


def _rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """transformers' Llama RMSNorm as torch's own op: equal in fp32; in bf16 the weight is
    applied before the one rounding, not after (at most one bf16 unit apart)."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


class FusedForward:
    """The forward over a transformers Llama-family causal LM, writing into a `KVCache`'s
    buffers (infer/cache.py: static layout). Build with `FusedForward.of(model)` (None where
    `why_not_fused` says no)."""

    def __init__(self, model):
        # Built at a target's first forward, often inside the engine's inference mode: the fused
        # weights must be ordinary tensors, whose version counter a kernel's packed copy reads.
        with torch.inference_mode(False), torch.no_grad():
            self._build(model)

    def _build(self, model):
        self.model = model
        config = model.config
        decoder = model.model
        self.embed, self.norm, self.rotary = decoder.embed_tokens, decoder.norm, decoder.rotary_emb
        self.lm_head = model.get_output_embeddings()
        attn0 = decoder.layers[0].self_attn
        self.head_dim = attn0.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.scaling = attn0.scaling
        self.layers = []
        for layer in decoder.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = _fuse([a.q_proj, a.k_proj, a.v_proj])
            gate_up = _fuse([m.gate_proj, m.up_proj])
            qk_norm = None
            if hasattr(a, "q_norm"):  # qwen3: per-head RMSNorm of q and k before RoPE
                qk_norm = (a.q_norm, a.k_norm)
            self.layers.append((layer.input_layernorm, qkv, qk_norm, a.o_proj, layer.post_attention_layernorm,
                                gate_up, m.act_fn, m.down_proj))  # fmt: skip
        # every linear this forward calls, for the CPU matmul kernel to route (and pack)
        self.linears = torch.nn.ModuleList(
            [mod for lay in self.layers for mod in (lay[1], lay[3], lay[5], lay[7])] + [self.lm_head]
        )
        self._first = decoder.layers[0]
        self._check = self._fingerprint()

    @classmethod
    def of(cls, model) -> FusedForward | None:
        return None if why_not_fused(model) else cls(model)

    def _fingerprint(self) -> tuple:
        a, m = self._first.self_attn, self._first.mlp
        mods = tuple(getattr(a, n) for n in PROJECTIONS) + tuple(getattr(m, n) for n in MLP)
        head = self.model.get_output_embeddings()
        return mods, head, a.q_proj.weight.data_ptr(), a.q_proj.weight.dtype, a.q_proj.weight.device

    @property
    def stale(self) -> bool:
        """The model changed after fusing: a projection or the LM head replaced (a LoRA layer, a
        draft vocabulary's smaller head) or the weights moved (`.to(dtype)`). The first layer
        stands for all: such changes apply to every layer alike."""
        return self._fingerprint() != self._check

    def _products(self) -> list:
        """Each layer's (qkv, o, gate_up, down) products and the LM head's, as the CPU matmul
        kernel routes them (infer/kernels.py `rows_linear`), bound again when the routing changed."""
        gen = routing_generation()
        if self.__dict__.get("_bound_at") != gen:
            lay = [tuple(rows_linear(m) for m in (q, o, gu, d)) for _, q, _, o, _, gu, _, d in self.layers]
            self._bound, self._bound_at = (lay, rows_linear(self.lm_head)), gen
        return self._bound

    def __call__(
        self,
        input_ids: torch.Tensor,
        cache,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        keep,
        hidden_layers: tuple[int, ...] | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits [rows, V], hidden [q, len*d] or None): `Target.forward_hidden`'s contract for a
        batch of one, whose rows stay 2-D [q, d] throughout. `keep` is transformers'
        logits_to_keep as `last_rows` gives it (0 or row indices)."""
        q, past = input_ids.shape[1], cache.length
        total = past + q
        x = self.embed(input_ids[0])
        layers = cache.buffers(x, self.num_kv_heads, self.head_dim)
        products, head = self._products()
        nh, nkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        half = hd // 2
        cos, sin = self.rotary(x, position_ids)  # [1, q, hd], transformers' RoPE variants included
        # rotate_half(x) * sin == roll(x, half) * sin with the first half of sin negated: exact
        sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1).view(q, 1, hd)
        cos = cos.view(q, 1, hd)
        group = nh // nkv
        # Decode and verify (few rows): each kv head's `group` query heads become rows of one
        # attention over that head's keys, so no key is repeated; rows g*q + t are position t
        # (the mask repeats per group). bf16 one-row attention took 27 us this way against
        # 88 us with SDPA's enable_gqa (SmolLM2's 9 heads over 3, 150 keys, 2-core EPYC).
        # A prefill keeps SDPA's causal GQA path.
        grouped = q <= GROUPED_ROWS
        mask, causal = None, False
        if attention_mask is not None:  # a tree: additive [1, 1, q, kv_length], sliced to the valid keys
            mask = attention_mask[0, 0, :, :total]
        elif q > 1 and past == 0 and not grouped:
            causal = True
        elif q > 1:  # a chain after a prefix (or a short prompt): bottom-right causal
            mask = torch.ones(q, total, dtype=torch.bool, device=x.device).tril_(past)
        if mask is not None and grouped and group > 1:
            mask = mask.repeat(group, 1)
        n_layers = len(self.layers)
        want = {i % (n_layers + 1) for i in hidden_layers} if hidden_layers else set()
        states = {0: x} if 0 in want else {}
        for i, (ln1, _, qk_norm, _, ln2, _, act, _) in enumerate(self.layers):
            qkv, o, gate_up, down = products[i]
            h = qkv(_rms_norm(x, ln1)).view(q, nh + 2 * nkv, hd)
            if qk_norm is None:  # RoPE on the q and k heads at once
                qk = h[:, : nh + nkv]
                qk = qk * cos + qk.roll(half, -1) * sin
                qs, ks = qk[:, :nh], qk[:, nh:]
            else:
                qs, ks = _rms_norm(h[:, :nh], qk_norm[0]), _rms_norm(h[:, nh : nh + nkv], qk_norm[1])
                qs = qs * cos + qs.roll(half, -1) * sin
                ks = ks * cos + ks.roll(half, -1) * sin
            layer = layers[i]
            layer.keys[0, :, past:total] = ks.transpose(0, 1)
            layer.values[0, :, past:total] = h[:, nh + nkv :].transpose(0, 1)
            keys, values = layer.keys[:, :, :total], layer.values[:, :, :total]
            if grouped:  # [q, nh, hd] -> [1, nkv, group * q, hd] and back
                rows = qs.reshape(q, nkv, group, hd).permute(1, 2, 0, 3).reshape(1, nkv, group * q, hd)
                a = F.scaled_dot_product_attention(rows, keys, values, attn_mask=mask, scale=self.scaling)
                a = a.view(nkv, group, q, hd).permute(2, 0, 1, 3).reshape(q, nh * hd)
            else:
                a = F.scaled_dot_product_attention(
                    qs.transpose(0, 1).unsqueeze(0), keys, values, attn_mask=mask, is_causal=causal,
                    scale=self.scaling, enable_gqa=group > 1,
                )  # fmt: skip
                a = a[0].transpose(0, 1).reshape(q, nh * hd)
            x = x + o(a)
            g, u = gate_up(_rms_norm(x, ln2)).chunk(2, dim=-1)
            x = x + down(act.forward(g) * u)
            if i + 1 in want and i + 1 < n_layers:
                states[i + 1] = x
        x = _rms_norm(x, self.norm)
        if n_layers in want:
            states[n_layers] = x
        logits = head(x[keep] if isinstance(keep, torch.Tensor) else x)
        hidden = None
        if hidden_layers:
            hidden = torch.cat([states[i % (n_layers + 1)] for i in hidden_layers], dim=-1)
        return logits, hidden


class LazyFused:
    """A model's `FusedForward`, built at its first use and again when it went stale; a model
    found unsupported is not examined again (`why` says why)."""

    def __init__(self):
        self.forward: FusedForward | None = None
        self.why: str | None = None

    def get(self, model) -> FusedForward | None:
        if self.why is not None:
            return None
        if self.forward is None or self.forward.stale:
            self.why = why_not_fused(model)
            self.forward = FusedForward(model) if self.why is None else None
        return self.forward

    def describe(self, model, kept: str | None) -> str:
        """Which forward `model` decodes with, and why (every report records it); `kept`: why its
        owner keeps transformers' forward whatever the model (None: it may fuse)."""
        if kept is not None:
            return f"transformers ({kept})"
        if self.get(model) is not None:
            return "fused (models/fused.py)"
        return f"transformers (not fused: {self.why})"


__all__ = ["FusedForward", "LazyFused", "MODEL_TYPES", "why_not_fused"]
