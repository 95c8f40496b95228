"""`dflash`: DFlash block-diffusion drafting (Chen, Liang and Liu, z-lab 2026, "DFlash: Block
Diffusion for Flash Speculative Decoding"; reference code github.com/z-lab/dflash).

The draft fills a whole block of masked positions in ONE forward, conditioned on the target's
hidden features. With p the position of the pending token x_p (sampled by the target, not yet
consumed by it) and K = block_size - 1:

    c_t  = hidden_norm(FC([h^(l1)_t; ...; h^(ln)_t]))        context, t < p   (n*d_target -> d)
    block = [x_p, m, m, ..., m] at positions p .. p+K            (m = mask_token_id)
    every draft layer i: keys/values = [W_k,v^i c_{<p} ; W_k,v^i x^i_block]   ("KV injection")
                         queries     = the block only, attending to ALL of them (non-causal)
    q_j = softmax(LMHead(norm(o_{p+j})))  for j = 1..K    (position p+j predicts token x_{p+j})

so the K draft tokens are conditionally independent given the context: a chain that lossless
verification (infer/verify.py) checks like any other. The context features are the outputs of
several target layers (like EAGLE-3's fused low/mid/high ones), projected once by FC and
hidden_norm and then by each draft layer's k/v projections (with k_norm and RoPE at their own
positions); only real target features ever enter the context cache, so accept() has nothing to
roll back. The embedding (block tokens, the mask token's row included) and the LM head are the
target's, borrowed and never saved, as vLLM shares them when a checkpoint lacks them.

Layout and weight names follow what vLLM loads (model_executor/models/qwen3_dflash.py,
DFlashQwen3ForCausalLM.load_weights; same as z-lab's DFlashDraftModel): fc, hidden_norm,
layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
post_attention_layernorm, mlp.{gate,up,down}_proj}, norm. Qwen3-style decoder layers (per-head
RMSNorm on q and k, NeoX RoPE), whatever the target's family.

Layer indices: `hidden_layers` are indices into transformers' `hidden_states` tuple, as for every
drafter here (i = output of decoder layer i-1). DFlash's own `target_layer_ids` count decoder
layer outputs from 0, so target_layer_ids = hidden_layers - 1 (vLLM adds the 1 back,
v1/worker/gpu/spec_decode/eagle/eagle3_utils.py, get_eagle3_aux_layers_from_config).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from draftsmith.errors import DraftsmithError
from draftsmith.infer.proposal import Proposal, check_num_speculative_tokens
from draftsmith.infer.sampling import SamplingConfig, logits_to_probs, sample
from draftsmith.infer.tree import TreeConfig

from .base import TrainedDrafter
from .eagle_family import EagleConfig, _join_rows
from .layers import MLP, RMSNorm, apply_rope
from .weights import check_draft_sizes, load_draft_weights, register_config


class DFlashConfig(EagleConfig):
    """An EagleConfig's layer shape (copied from the target) plus DFlash's block fields."""

    model_type = "draftsmith_dflash"

    def __init__(
        self,
        num_hidden_layers: int = 1,
        block_size: int = 8,
        mask_token_id: int = 0,
        target_hidden_size: int | None = None,
        causal: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_hidden_layers = num_hidden_layers  # draft layers
        self.block_size = block_size  # pending token + block_size - 1 masks
        self.mask_token_id = mask_token_id
        self.target_hidden_size = target_hidden_size or self.hidden_size
        self.causal = causal  # False (DFlash): the block attends to itself in both directions

    @property
    def num_speculative_tokens(self) -> int:
        return self.block_size - 1

    @property
    def target_layer_ids(self) -> list[int]:
        """DFlash's convention (decoder-layer outputs from 0): what vLLM's dflash_config holds."""
        return [i - 1 for i in self.hidden_layers]


def default_target_layers(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's `build_target_layer_ids` (layer outputs spread from layer 1 to L-3), at least three
    of them as EAGLE-3 fuses, as indices into hidden_states (+1)."""
    n, L = max(num_draft_layers, 3), num_target_layers
    start, end = 1, max(L - 3, 1)
    ids = sorted({int(round(start + i * (end - start) / (n - 1))) for i in range(n)})
    return [min(i, L - 2) + 1 for i in ids]


class DFlashAttention(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        d = c.hidden_size
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)
        self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps)

    def kv(self, x, cos, sin):
        """Keys (k_norm, RoPE) and values [B, KV, S, hd] of inputs x [B, S, d]: how both the
        context (vLLM's precompute_and_store_context_kv) and the block are projected."""
        B, S, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, S, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        return apply_rope(k, cos.unsqueeze(1), sin.unsqueeze(1)), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        B, Q, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, Q, self.heads, self.head_dim)).transpose(1, 2)
        q = apply_rope(q, cos.unsqueeze(1), sin.unsqueeze(1))
        k, v = self.kv(x, cos, sin)
        keys, values = torch.cat([ctx_k, k], 2), torch.cat([ctx_v, v], 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)  # GQA without copies
        return self.o_proj(out.transpose(1, 2).reshape(B, Q, self.heads * self.head_dim))


class DFlashLayer(nn.Module):
    """A Qwen3 decoder layer whose attention also sees the injected context keys/values."""

    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = DFlashAttention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, h, cos, sin, ctx_k, ctx_v, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, ctx_k, ctx_v, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class ContextCache:
    """Per draft layer, the context keys/values of every position whose real target feature is
    known: preallocated, appended to, never rolled back (the block's own keys are not stored).

    Kept whole: a forward writes its new rows in place (`write`, inside the forward) and attends
    over every slot, with `mask` hiding the ones not yet written. So a draft forward's shapes
    depend only on the rows it adds (1..k+1) and the block, never on the context length: what
    torch.compile / CUDA graphs need (fixed shapes at fixed buffer addresses)."""

    def __init__(self, config: DFlashConfig, max_length: int, dtype, device):
        shape = (1, config.num_key_value_heads, max_length, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.span = torch.arange(max_length, device=device)
        self.length = 0  # host bookkeeping, updated by the caller after each forward
        self.static = False

    @property
    def size(self) -> int:
        return self.k[0].shape[2]

    def mark_static(self) -> None:
        """Tell torch.compile the buffers never move (CUDA graphs then read them in place)."""
        self.static = True
        for t in self.k + self.v:
            torch._dynamo.mark_static_address(t)

    def reserve(self, length: int) -> None:
        """Room for `length` positions (rare: the engine sizes the cache at start())."""
        if length > self.size:
            grow = length + 64 - self.size
            self.k = [torch.cat([t, t.new_zeros(*t.shape[:2], grow, t.shape[3])], 2) for t in self.k]
            self.v = [torch.cat([t, t.new_zeros(*t.shape[:2], grow, t.shape[3])], 2) for t in self.v]
            self.span = torch.arange(self.size, device=self.span.device)
            if self.static:
                self.mark_static()

    def write(
        self, kvs: list[tuple[torch.Tensor, torch.Tensor]], positions: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Store the new rows' (k, v) [1, KV, m, hd] at `positions` [m]; -> every slot, per layer."""
        for i, (k, v) in enumerate(kvs):
            # Under autocast (training's acceptance measurement in bf16) the projections come out in
            # bf16 while the cache keeps the draft's own dtype: store them in the cache's.
            self.k[i].index_copy_(2, positions, k.to(self.k[i].dtype))
            self.v[i].index_copy_(2, positions, v.to(self.v[i].dtype))
        return list(zip(self.k, self.v))

    def mask(self, q: int, causal: bool) -> torch.Tensor:
        """[1, 1, q, size + q]: the written context slots, and the block's own keys (all of them,
        or up to each query for a causal block)."""
        context = (self.span < self.length)[None].expand(q, -1)
        block = torch.ones(q, q, dtype=torch.bool, device=self.span.device)
        return torch.cat([context, block.tril() if causal else block], 1).view(1, 1, q, -1)


class DFlashModel(PreTrainedModel):
    config_class = DFlashConfig
    base_model_prefix = "dflash"
    main_input_name = "input_ids"

    def __init__(self, config: DFlashConfig):
        super().__init__(config)
        d = config.hidden_size
        self.fc = nn.Linear(len(config.hidden_layers) * config.target_hidden_size, d, bias=False)
        self.hidden_norm = RMSNorm(d, config.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(config.llama_config())  # inv_freq: non-persistent
        self.__dict__["_embed"] = self.__dict__["_lm_head"] = None
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.02)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, LlamaRotaryEmbedding):
            super()._init_weights(module)  # recompute inv_freq (from_pretrained leaves it empty)

    def get_input_embeddings(self):
        return None

    def get_output_embeddings(self):
        return None

    def attach_target(self, target_model) -> None:
        """Borrow the target's embedding and LM head: never registered, so never trained or saved."""
        want = (self.config.vocab_size, self.config.hidden_size)
        emb, head = target_model.get_input_embeddings(), target_model.get_output_embeddings()
        for name, module in (("embedding", emb), ("LM head", head)):
            if tuple(module.weight.shape) != want:
                raise DraftsmithError(
                    f"the target's {name} is {tuple(module.weight.shape)}, this dflash draft needs {want}"
                )
        self.__dict__["_embed"], self.__dict__["_lm_head"] = emb, head

    def _borrowed(self, name: str):
        module = self.__dict__[name]
        if module is None:
            raise DraftsmithError(
                "this dflash draft borrows the target's embedding and LM head: call attach_target(target model) first"
            )
        return module.weight.detach()

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Target features [B, S, n*d_target] at positions [B, S] -> per layer (k, v) [B, KV, S, hd]."""
        c = self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))
        cos, sin = self.rotary(c, positions)
        return [layer.self_attn.kv(c, cos, sin) for layer in self.layers]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        features: torch.Tensor,
        feature_positions: torch.Tensor,
        cache: ContextCache | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ONE draft forward: block tokens input_ids [B, Q] at positions [B, Q] over the context.

        features [B, S, n*d_target] at feature_positions [B, S] are the context rows new to this
        call: written into `cache` when given (inference, B = 1; the keys are then every cache
        slot), else the whole context (training). attention_mask [B, 1, Q, keys + Q] (True = may
        attend) or None (every query sees every key). Returns the final-norm outputs [B, Q, d].
        """
        kvs = self.context_kv(features, feature_positions)
        if cache is not None:
            kvs = cache.write(kvs, feature_positions[0])
        h = F.embedding(input_ids, self._borrowed("_embed")).to(self.fc.weight.dtype)
        cos, sin = self.rotary(h, positions)
        for layer, (k, v) in zip(self.layers, kvs):
            h = layer(h, cos, sin, k, v, attention_mask)
        return self.norm(h)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        head = self._borrowed("_lm_head")
        if torch.is_autocast_enabled(out.device.type):  # F.linear casts both to the autocast dtype itself
            return F.linear(out, head)
        return F.linear(out, head.to(out.dtype))


class DFlash(TrainedDrafter):
    """The runtime drafter: one forward per step drafts a chain of up to block_size - 1 tokens."""

    kind = "dflash"
    model_class = DFlashModel
    needs_hidden_states = True
    supports_trees = False

    def __init__(self, model: DFlashModel, target, name: str, freeze: bool = True):
        super().__init__(model, target, name, freeze)
        check_config(model.config, target, f"the dflash draft {name}")
        model.attach_target(target.model)
        self.hidden_layers = tuple(model.config.hidden_layers)
        self.max_speculative_tokens = model.config.num_speculative_tokens  # its block: a larger K is refused
        self._cache: ContextCache | None = None
        self._pending: list[torch.Tensor] = []  # target features not yet in the cache
        # A compiled target (CUDA): the one draft forward is compiled too, one graph per
        # (new context rows, block) shape: 1..k+1 rows for a fixed k.
        self._compiled = self.compiled(self._draft)

    @classmethod
    def from_pretrained(cls, folder, target) -> DFlash:
        what = f"the dflash draft in {folder}"
        model = load_draft_weights(cls.model_class, folder, target, what, lambda c: check_config(c, target, what))
        return cls(model, target, str(folder))

    def start(self, prompt: torch.Tensor, max_length: int, hidden: torch.Tensor | None = None) -> None:
        if hidden is None:
            raise DraftsmithError("dflash drafts read the target's hidden states: run them through draftsmith's Engine")
        p = self.model.fc.weight
        if self._compiled is not None and self._cache is not None and self._cache.size == max_length + 1:
            self._cache.length = 0  # compiled: reuse the buffers (CUDA graphs read them in place)
        else:
            self._cache = ContextCache(self.model.config, max_length + 1, p.dtype, p.device)
            if self._compiled is not None:
                self._cache.mark_static()
        self._pending = [hidden]

    def accept(self, num_accepted: int, hidden: torch.Tensor | None = None) -> None:
        # The root and the accepted tokens, with the target's real features; after a plain step
        # they join the rows the next block has not read yet.
        if hidden is not None:
            self._pending.append(hidden)

    def propose(
        self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree: TreeConfig | None = None
    ) -> Proposal:
        if tree is not None:
            raise DraftsmithError("dflash drafts one block per step, a chain: it defines no token trees")
        cache, n, pending = self._cache, seq.shape[1], _join_rows(self._pending)
        m = 0 if pending is None else pending.shape[0]
        if cache is None or cache.length + m != n - 1 or m == 0:
            raise DraftsmithError(
                f"dflash drafter out of step with the engine ({0 if cache is None else cache.length} "
                f"context rows + {m} features for {n} tokens)"
            )
        check_num_speculative_tokens(k, self.max_speculative_tokens, f"the dflash draft {self.name}")
        device = self.model.fc.weight.device
        block = torch.full((1, k + 1), self.model.config.mask_token_id, dtype=torch.long, device=device)
        block[0, 0] = seq[0, n - 1]
        positions = torch.arange(n - 1, n + k, device=device).unsqueeze(0)
        # The first step brings the prompt's features (prefill, a new shape per prompt): eager.
        # Decided on the host: reading the position tensor would sync the device every step.
        prefill = cache.length == 0
        feature_positions = torch.arange(cache.length, n - 1, device=device).unsqueeze(0)
        cache.reserve(n - 1)
        cache.length = n - 1  # the mask shows the rows this forward writes
        mask = cache.mask(k + 1, self.model.config.causal)
        forward = self._draft if self._compiled is None or prefill else self._compiled
        with torch.no_grad():
            logits = forward(block, positions, pending.to(device).unsqueeze(0), feature_positions, mask)
        self._pending = []
        if sampling.greedy:
            return Proposal(logits.argmax(-1).to(self.target.device))
        probs = logits_to_probs(logits, sampling)  # the same processing as the target's
        return Proposal(sample(probs, generator).to(self.target.device), probs)

    def _draft(self, block, positions, features, feature_positions, mask) -> torch.Tensor:
        """The step's one forward: logits [k, V] for the block's masked positions (position
        p+j predicts token p+j). Shapes depend on the block and the new rows only."""
        out = self.model(block, positions, features, feature_positions, cache=self._cache, attention_mask=mask)
        return self.model.logits(out[0, 1:])


def check_config(config, target, what: str) -> None:
    """Sizes, and hidden layers a vLLM export can name: the outputs of decoder layers 0..L-2
    (hidden_states 1..L-1; hidden_states[L] is after the final norm, which vLLM never captures)."""
    check_draft_sizes(config, target, what)
    layers = target.config.num_hidden_layers
    bad = [i for i in config.hidden_layers if not 1 <= i <= layers - 1]
    if bad or not config.hidden_layers:
        raise DraftsmithError(
            f"{what} reads hidden layers {list(config.hidden_layers)}, but dflash reads the outputs of "
            f"{target.name}'s decoder layers: hidden states 1..{layers - 1} ({bad} out of range)"
        )
    if not 0 <= config.mask_token_id < target.vocab_size:
        raise DraftsmithError(
            f"{what}: mask token id {config.mask_token_id} is outside the target's vocabulary of {target.vocab_size}"
        )
    if config.block_size < 2:
        raise DraftsmithError(
            f"{what}: block_size {config.block_size} drafts nothing (the block is the pending token + block_size-1 "
            "masks)"
        )


def resolve_mask_token(tokenizer, vocab_size: int, explicit: int | None = None) -> int:
    """The mask token id, without growing the target's embedding (SpecForge's
    resolve_mask_token_id order): explicit, the tokenizer's mask token, the first embedding row
    no token uses, then pad, eos, unk."""
    size = len(tokenizer) if tokenizer is not None else vocab_size
    candidates = [
        explicit,
        getattr(tokenizer, "mask_token_id", None),
        size if size < vocab_size else None,
        *(getattr(tokenizer, a, None) for a in ("pad_token_id", "eos_token_id", "unk_token_id")),
    ]
    for i, c in enumerate(candidates):
        if c is None:
            continue
        if not 0 <= int(c) < vocab_size:
            if i == 0:
                raise DraftsmithError(f"drafter.mask_token_id {c} is outside the target's vocabulary of {vocab_size}")
            continue
        return int(c)
    raise DraftsmithError("no mask token: the tokenizer has no mask, pad, eos or unk token; set drafter.mask_token_id")


register_config(DFlashConfig)

__all__ = [
    "ContextCache",
    "DFlash",
    "DFlashConfig",
    "DFlashModel",
    "check_config",
    "default_target_layers",
    "resolve_mask_token",
]
