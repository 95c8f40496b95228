"""The decoder parts the feature-level drafters share (EAGLE, EAGLE-3, DFlash): RMSNorm, rotary
embedding, attention projections, the SiLU MLP, one Llama-style decoder layer with the attention
left to the caller, attention over a preallocated KV cache, and EAGLE-3's training-time-test
attention. Weight names are the ones serving engines load (q_proj, ..., post_attention_layernorm),
so a drafter built from these parts exports without renaming.

Configs are duck-typed: any object with the Llama layer fields (hidden_size, intermediate_size,
num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps, hidden_act).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from draftsmith.errors import DraftsmithError

# --- one Llama-style decoder layer, with the attention left to the caller -------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


class Attention(nn.Module):
    def __init__(self, c, in_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(in_dim, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=False)

    def qkv(self, x, cos, sin):
        """q [B, H, Q, hd], k and v [B, KV, Q, hd], RoPE applied."""
        B, Q, _ = x.shape
        q = self.q_proj(x).view(B, Q, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, Q, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, Q, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rope(x, cos, sin):
    """Rotary position embedding (Su et al. 2021, RoFormer eq. 34), in the rotate-half layout
    transformers' Llama uses: cos/sin broadcast over heads."""
    return x * cos + rotate_half(x) * sin


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        if c.hidden_act != "silu":
            raise DraftsmithError(f"eagle drafts use a SiLU (Llama) MLP; the config asks for {c.hidden_act!r}")
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """residual + Attn(x), then + MLP(post_norm(.)); x is built by the model (no input norm here
    for EAGLE-1; EAGLE-3's midlayer adds input_layernorm and hidden_norm, see eagle3.py)."""

    def __init__(self, c, attn_in_dim: int):
        super().__init__()
        self.self_attn = Attention(c, attn_in_dim)
        self.mlp = MLP(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, residual, cos, sin, attend):
        """`attend(q, k, v) -> [B, H, Q, hd]` decides what the queries see: a KV cache with a tree
        mask at inference, the training-time-test key sets in training."""
        q, k, v = self.self_attn.qkv(x, cos, sin)
        out = attend(q, k, v)
        B, H, Q, hd = out.shape
        h = residual + self.self_attn.o_proj(out.transpose(1, 2).reshape(B, Q, H * hd))
        return h + self.mlp(self.post_attention_layernorm(h))


def ttt_attention(
    q: torch.Tensor, past: list[tuple[torch.Tensor, torch.Tensor]], documents: torch.Tensor | None = None
) -> torch.Tensor:
    """Training-time test attention (EAGLE-3, Li et al. 2025, sec. 3.2; SpecForge's layout).

    past[0] = (k, v) of step 0 at every row (the real prefix); past[i] (i >= 1) = step i's own
    keys. At step j row t sees step 0's rows <= t (causal) and its own keys of steps 1..j -- what
    the draft at position t+j sees at inference after drafting j tokens past row t. The diagonal
    blocks are computed as row-wise dot products, so memory stays O(T^2) whatever j.

    Grouped-query attention without repeating keys: the G = H/KV query heads of a KV head are
    viewed as one [G*T] block (H = KV*G, heads grouped as repeat_interleave groups them). Each
    of the unrolled steps used to copy every earlier step's keys and values out to H heads
    (O(j) copies at step j, O(n^2) per forward and again in backward); now none is copied.

    documents ([B, T] ids, models/documents.py): a packed row's conversations; row t then sees
    step 0's rows of its own conversation only.
    """
    B, H, T, hd = q.shape
    KV = past[0][0].shape[1]
    G = H // KV
    scale = hd**-0.5
    k0, v0 = past[0]
    scores = (q.reshape(B, KV, G * T, hd) @ k0.transpose(-1, -2)).view(B, KV, G, T, T) * scale
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if documents is not None:  # [B, 1, 1, T, T]: causal and within one conversation
        causal = causal & (documents[:, :, None] == documents[:, None, :])[:, None, None]
    scores = scores.masked_fill(~causal, float("-inf"))
    qg = q.view(B, KV, G, T, hd)
    diag = [(qg * k.unsqueeze(2)).sum(-1, keepdim=True) * scale for k, _ in past[1:]]  # [B, KV, G, T, 1] each
    probs = torch.cat([scores, *diag], dim=-1).float().softmax(-1).to(q.dtype)
    out = (probs[..., :T].reshape(B, KV, G * T, T) @ v0).view(B, KV, G, T, hd)
    for i, (_, v) in enumerate(past[1:]):
        out = out + probs[..., T + i : T + i + 1] * v.unsqueeze(2)
    return out.reshape(B, H, T, hd)


def cached_attention(q, k, v, k_cache, v_cache, slots, mask) -> torch.Tensor:
    """Write this forward's keys/values at cache `slots` (in place: the cache keeps its address and
    shape, so a compiled drafting step is one graph per query count), then attend over the whole
    preallocated cache; `mask` [q, cache slots] says which keys each query sees."""
    k_cache.index_copy_(2, slots, k)
    v_cache.index_copy_(2, slots, v)
    return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask.view(1, 1, *mask.shape), enable_gqa=True)
