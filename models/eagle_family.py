"""What every EAGLE-family drafter shares (EAGLE-1 in models/eagle.py, EAGLE-3 in
models/eagle3.py; DFlash in models/dflash.py takes its layer shape from `EagleConfig`).

- `EagleConfig`: one decoder layer shaped like the target's (`layer_fields` copies heads, sizes
  and RoPE from it) and the target hidden states the draft reads (`hidden_layers`). With
  `model_type` "draftsmith_eagle" it is also EAGLE-1's own checkpoint config.
- `EagleDraftModel`: the target's embedding (borrowed, never saved), RoPE, one step of the
  decoder layer, and the training-time forward over n unrolled steps (EAGLE-3's "training-time
  test"; one step is EAGLE-1's teacher forcing). Each kind supplies `fuse`, `layer_inputs` and
  `draft_logits`.
- `EagleDrafter`: the runtime drafter: the draft's own KV cache, chains, and EAGLE-2 dynamic
  trees.

EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees")
shapes the tree per step from the draft's own confidence: expand the top-k frontier by
cumulative log-probability for `depth` steps, then keep the `num_draft_tokens` best nodes
(sec. 4). `EagleDrafter.propose` does this for EAGLE-1 and EAGLE-3 alike.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from draftsmith.errors import DraftsmithError
from draftsmith.infer.proposal import Proposal
from draftsmith.infer.sampling import SamplingConfig, logits_to_probs, sample
from draftsmith.infer.tree import Tree, TreeConfig

from .base import TrainedDrafter
from .documents import document_ids, row_positions
from .layers import DecoderLayer, RMSNorm, cached_attention, ttt_attention
from .weights import check_draft_sizes, load_draft_weights, register_config

log = logging.getLogger(__name__)

DEFAULT_TOPK, DEFAULT_DEPTH = 4, 4  # EAGLE-2's paper uses 10 and 6 on GPUs; a CPU pays per node

# The decoder-layer fields a draft copies from its target (a layer of the target's shape).
LAYER_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "max_position_embeddings",
    "hidden_act",
)


class EagleConfig(PretrainedConfig):
    model_type = "draftsmith_eagle"

    def __init__(
        self,
        hidden_size: int = 64,
        intermediate_size: int = 128,
        num_attention_heads: int = 4,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        rms_norm_eps: float = 1e-6,
        rope_parameters: dict | None = None,
        max_position_embeddings: int = 2048,
        hidden_act: str = "silu",
        vocab_size: int = 32000,
        target: str = "",
        hidden_layers: list[int] | None = None,
        **kwargs,
    ):
        kwargs.setdefault("tie_word_embeddings", False)  # the embedding and LM head are the target's
        super().__init__(**kwargs)
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.rms_norm_eps, self.max_position_embeddings, self.hidden_act = (
            rms_norm_eps,
            max_position_embeddings,
            hidden_act,
        )
        self.rope_parameters = rope_parameters or {"rope_type": "default", "rope_theta": 10000.0}
        self.vocab_size = vocab_size  # the target's
        self.target = target
        # Indices into the target's hidden_states tuple the draft reads (-1: after the final norm).
        self.hidden_layers = list(hidden_layers) if hidden_layers is not None else [-1]

    @classmethod
    def layer_fields(cls, target_config) -> dict:
        """A decoder layer shaped like one of the target's (heads, sizes, RoPE)."""
        out = {
            name: getattr(target_config, name)
            for name in LAYER_FIELDS
            if getattr(target_config, name, None) is not None
        }
        rope = getattr(target_config, "rope_parameters", None)
        if not rope:
            rope = {"rope_type": "default", "rope_theta": float(getattr(target_config, "rope_theta", 10000.0))}
        out["rope_parameters"] = dict(rope)
        return out

    def llama_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab_size,
            num_hidden_layers=1,
            rope_parameters=dict(self.rope_parameters),
            **{name: getattr(self, name) for name in LAYER_FIELDS},
        )


# --- the draft model ------------------------------------------------------------------------------


class EagleDraftModel(PreTrainedModel):
    """What EAGLE-1 and EAGLE-3 drafts share: the target's embedding (attached, unregistered),
    RoPE, one step of the decoder layer, and the training-time forward over n unrolled steps."""

    main_input_name = "input_ids"

    def __init__(self, config):
        super().__init__(config)
        self.rotary = LlamaRotaryEmbedding(config.llama_config())  # inv_freq is a non-persistent buffer
        self.__dict__["_embed"] = None

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, 0.02)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, LlamaRotaryEmbedding):
            # inv_freq is a non-persistent buffer: from_pretrained materialises it empty (whatever
            # was in that memory) and relies on _init_weights to recompute RoPE's frequencies.
            super()._init_weights(module)

    def get_input_embeddings(self):
        return None

    def get_output_embeddings(self):
        return None

    def attach_target(self, target_model) -> None:
        """Borrow the target's embedding (and, in EAGLE-1, LM head): never registered, so never
        trained or saved."""
        emb = target_model.get_input_embeddings()
        if tuple(emb.weight.shape) != (self.config.vocab_size, self.config.hidden_size):
            raise DraftsmithError(
                f"the target's embedding is {tuple(emb.weight.shape)}, this eagle draft needs "
                f"({self.config.vocab_size}, {self.config.hidden_size})"
            )
        self.__dict__["_embed"] = emb

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        emb = self.__dict__["_embed"]
        if emb is None:
            raise DraftsmithError(
                "this eagle draft borrows the target's embedding: call attach_target(target model) first"
            )
        return F.embedding(ids, emb.weight.detach()).to(self.fc.weight.dtype)

    # Per-kind pieces (EagleModel in eagle.py, Eagle3Model in eagle3.py).
    @property
    def layer(self) -> DecoderLayer:
        raise NotImplementedError

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [..., len(hidden_layers)*d] -> the draft's hidden input [..., d]."""
        raise NotImplementedError

    def layer_inputs(self, emb, h):
        """(attention input, residual) for token embeddings `emb` and hidden `h`."""
        raise NotImplementedError

    def draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary for layer outputs `out`."""
        raise NotImplementedError

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids -> target ids (identity unless the draft has its own vocabulary)."""
        return draft_ids

    def target_logits(self, out: torch.Tensor) -> torch.Tensor:
        """Logits over the target vocabulary (-inf where the draft cannot propose)."""
        return self.draft_logits(out)

    def step(self, ids, h, positions, attend) -> torch.Tensor:
        """One draft step: tokens ids [B, Q] with hidden h [B, Q, d] at positions [B, Q] -> [B, Q, d]."""
        a, residual = self.layer_inputs(self.embed(ids), h)
        cos, sin = self.rotary(a, positions)
        return self.layer(a, residual, cos, sin, attend)

    def forward(
        self, input_ids: torch.Tensor, features: torch.Tensor, num_steps: int = 1, position_ids=None
    ) -> list[torch.Tensor]:
        """Training-time forward: outputs [B, T, d] of `num_steps` unrolled steps.

        Row t at step j reads token input_ids[t+1+j] (the data's, not the draft's guess) at
        position t+j, and the hidden state: the fused target feature at t for j = 0, else its own
        output of step j-1; its output predicts the feature behind token t+2+j. Keys as in
        `ttt_attention`. With num_steps=1 this is plain EAGLE-1 teacher forcing. position_ids
        [B, T] (restarting at each conversation of a packed row): row t's position is its own
        conversation's, and it attends within that conversation only (models/documents.py).
        """
        B, T = input_ids.shape
        h = self.fuse(features.to(self.fc.weight.dtype))
        past: list[tuple[torch.Tensor, torch.Tensor]] = []
        rows = row_positions(position_ids, (B, T), input_ids.device)
        documents = None if position_ids is None else document_ids(rows)

        def attend(q, k, v):
            past.append((k, v))
            return ttt_attention(q, past, documents)

        outs = []
        for j in range(num_steps):
            ids = F.pad(input_ids[:, 1 + j :], (0, min(1 + j, T)))[:, :T]  # shifted left, 0-padded
            positions = rows + j
            h = self.step(ids, h, positions, attend)
            outs.append(h)
        return outs


# --- the runtime drafter --------------------------------------------------------------------------


class EagleDrafter(TrainedDrafter):
    """The runtime every EAGLE-family drafter shares (EAGLE-1, EAGLE-3): drafts chains, or
    EAGLE-2 dynamic trees, from the target's hidden states. A kind sets `kind` and
    `model_class` (its EagleDraftModel).

    The draft keeps its own KV cache: slot s holds row s (token s+1 with the target's feature
    at s) for every row whose real feature is known; tree nodes of the current step go in slots
    after those and are overwritten next step (the real features of accepted tokens replace
    them: accept() hands them over).
    """

    model_class: type[EagleDraftModel]
    needs_hidden_states = True
    supports_trees = True

    def __init__(self, model: EagleDraftModel, target, name: str, freeze: bool = True):
        super().__init__(model, target, name, freeze)
        check_config(model.config, target, f"the {self.kind} draft {name}")
        model.attach_target(target.model)
        self.hidden_layers = tuple(model.config.hidden_layers)
        self._k = self._v = self._span = None
        # A compiled target (CUDA): the draft's step forward is compiled too, one graph per query
        # count (catch-up 1..k+1 rows, a chain's 1, a tree level's frontier).
        self._compiled = self.compiled(self._step)
        self._rows = 0  # slots holding real rows
        self._pending: list[torch.Tensor] = []  # target features of rows not yet in the cache

    @classmethod
    def from_pretrained(cls, folder, target) -> EagleDrafter:
        what = f"the {cls.kind} draft in {folder}"
        model = load_draft_weights(cls.model_class, folder, target, what, lambda c: check_config(c, target, what))
        return cls(model, target, str(folder))

    # --- the engine's interface --------------------------------------------------------------

    def start(self, prompt: torch.Tensor, max_length: int, hidden: torch.Tensor | None = None) -> None:
        if hidden is None:
            raise DraftsmithError(
                f"{self.kind} drafts read the target's hidden states: run them through draftsmith's Engine"
            )
        self._allocate(max_length + 64)  # + room for one step's tree nodes (grown if a tree needs more)
        self._rows, self._pending = 0, [hidden]

    def _allocate(self, slots: int, growing: bool = False) -> None:
        """The draft's KV cache: `slots` positions, kept whole. Every forward attends over all of
        them with a full-width mask (stale slots masked out), so a forward's shapes depend only
        on its query count, never on the context length: what torch.compile / CUDA graphs need
        (one graph per query count, at fixed buffer addresses)."""
        c = self.model.config
        p = self.model.fc.weight
        if not growing and self._compiled is not None and self._k is not None and self._k.shape[2] == slots:
            return  # compiled: the next request reuses the buffers (CUDA graphs read them in place)
        old = (self._k, self._v) if growing else None
        self._k = torch.zeros((1, c.num_key_value_heads, slots, c.head_dim), dtype=p.dtype, device=p.device)
        self._v = torch.zeros_like(self._k)
        if old is not None:  # a tree deeper than start() planned for: keep what was written
            self._k[:, :, : old[0].shape[2]], self._v[:, :, : old[1].shape[2]] = old
        self._span = torch.arange(slots, device=p.device)
        if self._compiled is not None:
            torch._dynamo.mark_static_address(self._k)
            torch._dynamo.mark_static_address(self._v)

    def accept(self, num_accepted: int, hidden: torch.Tensor | None = None) -> None:
        # The root and accepted rows, now with the target's real features; after a plain step
        # (no propose in between) they queue behind the rows still waiting: no draft forward
        # until the next propose, whose catch-up takes them all in one batched forward.
        if hidden is not None:
            self._pending.append(hidden)

    def propose(
        self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree: TreeConfig | None = None
    ) -> Proposal:
        with torch.no_grad():
            last = self._catch_up(seq)
            if tree is None:
                return self._chain(last, seq.shape[1], k, sampling, generator)
            return self._tree(last, seq.shape[1], tree)

    def max_tree_nodes(self, cfg: TreeConfig) -> int:
        topk, depth, budget = _tree_dims(cfg)
        return min(budget, topk + (depth - 1) * topk * topk)

    # --- drafting ----------------------------------------------------------------------------

    def _step(self, ids, h, positions, slots, mask) -> torch.Tensor:
        """One draft forward of q tokens ([q] ids, [q, d] hidden) written at cache `slots`, each
        query seeing the keys `mask` [q, slots in the cache] allows. Shapes depend on q only."""

        def attend(q, k, v):
            return cached_attention(q, k, v, self._k, self._v, slots, mask)

        return self.model.step(ids.view(1, -1), h.unsqueeze(0), positions.view(1, -1), attend)[0]

    def _run(self, ids, h, positions, slots, mask, prefill: bool = False) -> torch.Tensor:
        # The prompt's rows (prefill) vary with every prompt: eager, as the target's prefill.
        if prefill or self._compiled is None:
            return self._step(ids, h, positions, slots, mask)
        # A CUDA graph's output lives in memory its next replay reuses, and a chain feeds it back
        # in: a copy (d numbers per row) is what the next step may keep.
        return self._compiled(ids, h, positions, slots, mask).clone()

    def _reserve(self, slots: int) -> None:
        """Room for `slots` cache positions (rare: a tree wider than start() planned for)."""
        if slots > self._k.shape[2]:
            self._allocate(slots + 64, growing=True)

    def _catch_up(self, seq: torch.Tensor) -> torch.Tensor:
        """Run the rows whose target features arrived since the last step; the output of the
        last one (the pending token's row) is where drafting starts. -> [1, d]"""
        n, c, pending = seq.shape[1], self._rows, _join_rows(self._pending)
        m = 0 if pending is None else pending.shape[0]
        if c + m != n - 1 or m == 0:
            raise DraftsmithError(
                f"{self.kind} drafter out of step with the engine ({c} rows + {m} features for {n} tokens)"
            )
        device = self._k.device
        h = self.model.fuse(pending.to(device=device, dtype=self._k.dtype))
        rows = torch.arange(c, n - 1, device=device)
        self._reserve(n - 1)
        mask = self._span[None] <= rows[:, None]  # causal over the real rows; later slots are stale
        # Positions and slots coincide here; distinct tensors keep one compiled graph per shape
        # (dynamo guards on aliasing between inputs).
        out = self._run(seq[0, c + 1 : n].to(device), h, rows, rows.clone(), mask, prefill=c == 0)
        self._rows, self._pending = n - 1, []
        return out[-1:]

    def _chain(self, last, n: int, k: int, sampling: SamplingConfig, generator) -> Proposal:
        c, device = self._rows, self._k.device
        h, tokens, probs = last, [], []
        for d in range(1, k + 1):
            if sampling.greedy:  # the argmax over the draft's own vocabulary, mapped to the target's
                tok = self.model.target_ids(self.model.draft_logits(h)[0].argmax(-1, keepdim=True))
            else:  # the whole target vocabulary: verification divides by q over it
                logits = self.model.target_logits(h)[0]
                q = logits_to_probs(logits, sampling)
                tok = sample(q, generator).view(1)
                probs.append(q)
            tokens.append(tok)
            if d < k:  # a chain sees every slot up to its own
                self._reserve(c + d)
                slot = torch.tensor([c + d - 1], device=device)
                position = torch.tensor([n - 2 + d], device=device)
                h = self._run(tok, h, position, slot, (self._span < c + d)[None])
        toks = torch.cat(tokens).to(self.target.device)
        return Proposal(toks, torch.stack(probs) if probs else None)

    def _tree(self, last, n: int, cfg: TreeConfig) -> Proposal:
        """EAGLE-2 (sec. 4): expand the top-`topk` frontier by cumulative draft log-probability
        for `depth` levels, then rerank every candidate and keep the best num_draft_tokens-1.
        Children are the draft's top-k (deterministic), so verification is EAGLE-2's lossless
        scheme (tree_speculative_sampling without draft probabilities) or greedy."""
        if cfg.choices is not None:
            raise DraftsmithError(
                f"{self.kind} drafts build their tree per step (EAGLE-2): use --tree-topk, --tree-depth "
                "and --tree-num-draft-tokens instead of --tree-choices"
            )
        if cfg.children != "topk":
            raise DraftsmithError(
                f"{self.kind} trees take the draft's top-k children (EAGLE-2); children 'sampled' is for medusa"
            )
        topk, depth, budget = _tree_dims(cfg)
        c, device = self._rows, self._k.device
        logp = self.model.draft_logits(last).float().log_softmax(-1)[0]
        score, ids = logp.topk(min(topk, logp.shape[-1]))
        # Candidate nodes; node i's parent is parents[i] (-1: the root). The host reads each
        # level once (tokens, scores and the next frontier in one tensor: every read-back is a
        # device sync); the frontier's ids and scores stay on the device for the next level.
        w, first_ids = score.shape[0], self.model.target_ids(ids)  # the draft embeds target ids
        tokens, scores = _read_back(first_ids, score, sizes=(w, w))
        tokens = [int(t) for t in tokens]
        parents, ranks, depths = [-1] * len(tokens), list(range(len(tokens))), [1] * len(tokens)
        frontier, frontier_h = list(range(len(tokens))), last.expand(len(tokens), -1)
        frontier_ids, frontier_scores = first_ids, score
        seen: dict[int, list[int]] = {}  # expanded node -> cache slots of its ancestors and itself
        next_slot = c
        for d in range(2, depth + 1):
            q = len(frontier)
            # Built on the host and moved once: per-element writes would be a kernel each on a GPU.
            self._reserve(next_slot + q)
            mask = torch.zeros(q, self._k.shape[2], dtype=torch.bool)
            mask[:, :c] = True
            for i, node in enumerate(frontier):
                seen[node] = (seen[parents[node]] if parents[node] >= 0 else []) + [next_slot + i]
                mask[i, seen[node]] = True
            slots = torch.arange(next_slot, next_slot + q, device=device)
            positions = torch.full((q,), n - 3 + d, device=device)
            out = self._run(frontier_ids, frontier_h, positions, slots, mask.to(device))
            next_slot += q
            child_logp = self.model.draft_logits(out).float().log_softmax(-1)
            top, child_ids = child_logp.topk(min(topk, child_logp.shape[-1]), dim=-1)  # [q, topk]
            cum = frontier_scores[:, None] + top
            first = len(tokens)
            width = cum.shape[1]
            flat_ids, flat_cum = self.model.target_ids(child_ids.flatten()), cum.flatten()
            best = flat_cum.topk(min(topk, cum.numel())).indices if d < depth else flat_cum[:0].long()
            child_tokens, child_scores, best_host = _read_back(
                flat_ids, flat_cum, best, sizes=(q * width, q * width, best.shape[0])
            )
            tokens += [int(t) for t in child_tokens]
            scores += child_scores
            parents += [f for f in frontier for _ in range(width)]
            ranks += list(range(width)) * q
            depths += [d] * (q * width)
            if d < depth:
                frontier = [first + int(b) for b in best_host]
                frontier_h = out[best // width]
                frontier_ids, frontier_scores = flat_ids[best], flat_cum[best]
        # Rerank: a child never outscores its parent (log-probs <= 0), and ties go to the
        # shallower node, so the best `budget` nodes always form a tree.
        keep = sorted(range(len(tokens)), key=lambda i: (-scores[i], depths[i], ranks[i]))[:budget]
        paths: dict[int, tuple[int, ...]] = {}
        for i in sorted(keep, key=lambda i: depths[i]):
            paths[i] = (paths[parents[i]] if parents[i] >= 0 else ()) + (ranks[i],)
        order = sorted(keep, key=lambda i: (depths[i], paths[i]))
        tree = Tree([paths[i] for i in order])
        return Proposal(torch.tensor([tokens[i] for i in order], device=self.target.device), None, tree=tree)


def _read_back(*parts: torch.Tensor, sizes: tuple[int, ...]) -> list[list[float]]:
    """Several 1-D tensors (ids, float32 scores) read to the host in one device sync, as lists of
    `sizes`. float64 holds every id below 2^53 and every float32 score exactly, so the values are
    those each tensor's own .tolist() gives."""
    flat = torch.cat([x.reshape(-1).double() for x in parts]).tolist()
    out, at = [], 0
    for n in sizes:
        out.append(flat[at : at + n])
        at += n
    return out


def _tree_dims(cfg: TreeConfig) -> tuple[int, int, int]:
    topk, depth = cfg.topk or DEFAULT_TOPK, cfg.depth or DEFAULT_DEPTH
    budget = cfg.num_draft_tokens - 1 if cfg.num_draft_tokens else topk + (depth - 1) * topk * topk
    return topk, depth, budget


def check_config(config, target, what: str) -> None:
    check_draft_sizes(config, target, what)
    layers = target.config.num_hidden_layers
    bad = [i for i in config.hidden_layers if not -(layers + 1) <= i <= layers]
    if bad:
        raise DraftsmithError(
            f"{what} reads hidden layers {list(config.hidden_layers)}, but {target.name} has "
            f"{layers + 1} hidden states (indices {-(layers + 1)}..{layers}): {bad} missing"
        )


register_config(EagleConfig)

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_TOPK",
    "LAYER_FIELDS",
    "EagleConfig",
    "EagleDraftModel",
    "EagleDrafter",
    "check_config",
    "ttt_attention",
]


def _join_rows(rows: list[torch.Tensor]) -> torch.Tensor | None:
    """Feature rows waiting for a drafter's next step, earlier ones first, as one tensor (None:
    none). Joined once, at that step, not at every plain step before it."""
    if len(rows) <= 1:
        return rows[0] if rows else None
    return torch.cat([r.to(rows[0].device) for r in rows])
