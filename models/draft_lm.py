"""`draft_lm`: an independent causal LM that shares the target's tokenizer.

The classic speculative-decoding drafter (Leviathan et al. 2023; Chen et al. 2023): a smaller
model of the same family, a distilled one (train/), or the target's first N layers
(`truncated:N`, a sensible initialisation before distillation: it keeps the embeddings, the
final norm and the LM head). A checkpoint is a plain transformers causal-LM folder, so the same
files load as transformers' `assistant_model` and in serving engines.

A draft vocabulary (FR-Spec, Zhao et al. 2025) makes drafting cheaper: the trainer may write the
ids of the target tokens most frequent in its training data to `draft_vocab.json` beside
the weights, and the runtime then computes the draft's logits over those rows of its LM head only
(a 152k-token head is a large share of each token a 0.5B draft proposes). The
draft proposes only those tokens; the target still verifies over its whole vocabulary, so greedy
outputs and the sampled law are unchanged (a draft law that is zero elsewhere is one that lossless
rejection sampling accepts as any other). Engines that load the folder ignore the file and draft
over the whole vocabulary.
"""

from __future__ import annotations

import copy
import json
import pathlib

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import first_line
from draftsmith.infer.cache import CachePool, KVCache
from draftsmith.infer.proposal import Proposal
from draftsmith.infer.sampling import SamplingConfig, logits_to_probs, sample

from .base import TrainedDrafter
from .sources import check_same_tokenizer, load_causal_lm, load_tokenizer
from .target import last_rows


def truncate_model(model, num_layers: int, name: str = "the target"):
    """A new causal LM of `model`'s class holding a copy of its first `num_layers` decoder layers,
    embeddings, final norm and LM head (parameters trainable, on the CPU in `model`'s dtype)."""
    total = model.config.num_hidden_layers
    if not 1 <= num_layers < total:
        raise DraftsmithError(f"truncated:{num_layers}: {name} has {total} layers; choose 1..{total - 1}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if isinstance(getattr(config, "layer_types", None), list):  # per-layer attention kinds (Qwen2 & co)
        config.layer_types = config.layer_types[:num_layers]
    draft = type(model)(config).to(dtype=next(model.parameters()).dtype)
    missing, _unexpected = draft.load_state_dict(model.state_dict(), strict=False)
    # Layers >= num_layers are "unexpected" by design; anything missing means a layout we don't know.
    missing = [m for m in missing if not m.endswith("rotary_emb.inv_freq")]
    if missing:
        raise DraftsmithError(f"truncating {name}: weights not found in the target: {missing[:5]}")
    return draft


# {"draft_ids": sorted distinct target ids}. JSON, not safetensors: engines load every
# *.safetensors file in a model folder as weights, and vLLM refuses one it has no parameter for.
DRAFT_VOCAB = "draft_vocab.json"


def read_draft_vocab(folder, target_vocab_size: int, head_rows: int) -> torch.Tensor | None:
    """The draft vocabulary stored beside a draft LM's weights (None: no file), checked: a
    sorted, distinct list of ids inside both the target's vocabulary and the draft's LM head."""
    path = pathlib.Path(folder) / DRAFT_VOCAB
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text())["draft_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            raise ValueError("draft_ids must be a non-empty list of token ids")
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise DraftsmithError(f"{path}: not a readable draft vocabulary ({type(e).__name__}: {first_line(e)})") from e
    ids = torch.tensor(ids, dtype=torch.long)
    if bool((ids[1:] <= ids[:-1]).any()):
        raise DraftsmithError(f"{path}: draft_ids must be distinct and in increasing order (a corrupt file)")
    limit = min(target_vocab_size, head_rows)
    if int(ids[0]) < 0 or int(ids[-1]) >= limit:
        raise DraftsmithError(
            f"{path}: holds token id {int(ids[-1])}, outside the target's vocabulary of {target_vocab_size} "
            f"or the draft's LM head of {head_rows} rows: written for another model"
        )
    return ids


def write_draft_vocab(folder, ids: torch.Tensor) -> None:
    path = pathlib.Path(folder) / DRAFT_VOCAB
    path.write_text(json.dumps({"draft_ids": [int(i) for i in ids.detach().cpu().tolist()]}) + "\n")


def load_draft_model(name_or_path: str, target):
    """A causal LM that shares `target`'s tokenizer, in its dtype and on its device; a tokenizer
    mismatch or unreadable weights are one clear error."""
    check_same_tokenizer(load_tokenizer(name_or_path), target.tokenizer, name_or_path, target.name)
    try:
        return load_causal_lm(name_or_path, dtype=target.dtype, device=target.device)
    except DraftsmithError:
        raise
    except Exception as e:  # noqa: BLE001 -- corrupt weights raise safetensors' own error type, among others
        raise DraftsmithError(
            f"draft {name_or_path}: could not load the model ({type(e).__name__}: {first_line(e)})"
        ) from e


class DraftLM(TrainedDrafter):
    kind = "draft_lm"
    needs_hidden_states = False
    fusable = True

    def __init__(self, model, target, name: str, freeze: bool = True, draft_ids: torch.Tensor | None = None):
        super().__init__(model, target, name, freeze)
        self.cache: KVCache | None = None
        self._context = None  # context length at the last propose(): where accepted drafts start
        self._full_head = None  # the model's own output layer while a draft vocabulary replaces it
        self.draft_ids: torch.Tensor | None = None
        self.set_draft_vocab(draft_ids)
        # Compiled with the target (CUDA): propose() feeds 1 or 2 tokens per forward, two shapes
        # over a static cache, each captured once as a CUDA graph; start()'s prefill stays eager.
        self._compiled = self.compiled(self.model.forward)

    @classmethod
    def from_pretrained(cls, name_or_path: str, target, draft_vocab: bool = True) -> DraftLM:
        """Load any causal LM (built-in, folder, .gguf, Hub id) as a draft for `target`, with the
        draft vocabulary stored beside it (unless `draft_vocab` is False)."""
        model = load_draft_model(name_or_path, target)
        ids = None
        if draft_vocab and pathlib.Path(name_or_path).is_dir():
            ids = read_draft_vocab(name_or_path, target.vocab_size, model.get_output_embeddings().weight.shape[0])
        return cls(model, target, name_or_path, draft_ids=ids)

    def set_draft_vocab(self, draft_ids: torch.Tensor | None) -> None:
        """Draft over the target ids `draft_ids` only (their rows of the LM head; None: the whole
        vocabulary). Swaps the model's output layer for a smaller Linear, so a later dtype or
        CPU-kernel choice (Target.use_cpu_matmul) applies to it like any other layer. Not on a
        model that is training: the head it trains is the full one."""
        if draft_ids is None:
            if self._full_head is not None:
                self.model.set_output_embeddings(self._full_head)
            self.draft_ids = self._full_head = None
            return
        if self.model.training:
            raise DraftsmithError("a draft vocabulary is for a frozen draft, not one that is training")
        if self._full_head is None:
            self._full_head = self.model.get_output_embeddings()
        w = self._full_head.weight
        head = torch.nn.Linear(w.shape[1], draft_ids.numel(), bias=False, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            head.weight.copy_(w[draft_ids.to(w.device)])
        self.model.set_output_embeddings(head.requires_grad_(False))
        self.draft_ids = draft_ids.to(w.device)

    @classmethod
    def truncated(cls, target, num_layers: int) -> DraftLM:
        """The target's first `num_layers` decoder layers plus its embeddings, final norm and LM head."""
        model = truncate_model(target.model, num_layers, target.name).to(device=target.device, dtype=target.dtype)
        return cls(model, target, f"truncated:{num_layers}")

    def start(self, prompt: torch.Tensor, max_length: int, hidden=None) -> None:
        # this draft's cache of that length, reset, if it has one: graphs over it replay
        pool = self.__dict__.get("_cache_pool")
        if pool is None:  # compiled: a few length buckets; eager: lengths vary, keep the last
            pool = self.__dict__["_cache_pool"] = CachePool(keep=4 if self._compiled is not None else 1)
        self.cache = pool.get(max_length, lambda: KVCache(self.model.config, max_length))
        self._forward(prompt, decode=False)

    def _forward(self, ids: torch.Tensor, decode: bool = True) -> torch.Tensor:
        """Feed ids [1, q] into the draft's cache; next-token logits after the last one."""
        q = ids.shape[1]
        pos = torch.arange(self.cache.length, self.cache.length + q, device=ids.device).unsqueeze(0)
        fused = self.fused_forward() if self.cache.layout == "static" else None
        if fused is not None:
            logits, _ = fused(ids, self.cache, pos, None, last_rows(1, q, ids.device), None)
            self.cache.advance(q, by_transformers=False)
            return self._in_target_vocab(logits[-1])
        if decode and self._compiled is not None and q <= 2:  # all q rows' logits: one fixed shape per q
            # A fresh tensor: a slice of the engine's sequence has other strides than the drafted
            # token's reshape, and torch.compile guards on strides (a second graph for q = 1).
            forward, keep, ids = self._compiled, 0, ids.clone(memory_format=torch.contiguous_format)
        else:
            forward, keep = self.model, last_rows(1, q, ids.device)
        out = forward(
            input_ids=ids,
            **self.cache.forward_kwargs(self.model),
            position_ids=pos,
            use_cache=True,
            logits_to_keep=keep,
        )
        self.cache.advance(q)
        return self._in_target_vocab(out.logits[0, -1])

    def _in_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """The draft's next-token logits [V_draft] placed over the target's vocabulary."""
        if self.draft_ids is not None:  # the draft vocabulary's logits, placed among the target's ids
            full = logits.new_full((self.target_vocab,), float("-inf"))
            return full.index_copy_(0, self.draft_ids.to(logits.device), logits)
        # Same tokenizer, but the embedding matrices may be padded differently: align to the target's.
        v = self.target_vocab
        if logits.shape[-1] > v:
            logits = logits[:v]
        elif logits.shape[-1] < v:
            logits = torch.cat([logits, logits.new_full((v - logits.shape[-1],), float("-inf"))])
        return logits

    def propose(self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree=None) -> Proposal:
        self._context = seq.shape[1]
        # What the draft has not seen yet: 1-2 tokens, more after plain steps (adaptive K = 0).
        ids = seq[:, self.cache.length :]
        tokens, probs = [], []
        for _i in range(k):
            logits = self._forward(ids)
            if sampling.greedy:  # no distribution needed: verification treats the token as one-hot q
                tok = logits.argmax(-1)
            else:
                p = logits_to_probs(logits, sampling)
                tok = sample(p, generator)
                probs.append(p)
            tokens.append(tok)
            ids = tok.reshape(1, 1)
        # d_k was sampled but never fed: the cache holds context + d_1..d_{k-1}.
        return Proposal(torch.stack(tokens), torch.stack(probs) if probs else None)

    def accept(self, num_accepted: int, hidden=None) -> None:
        if self._context is None:  # a plain step (no propose): the next propose catches up
            return
        self.cache.crop(min(self.cache.length, self._context + num_accepted))
        self._context = None

    def as_assistant_model(self):
        """The underlying transformers model, for `generate(assistant_model=...)` baselines: with
        its whole LM head (transformers drafts over the full vocabulary), sharing every weight."""
        if self._full_head is None:
            return self.model
        model = copy.copy(self.model)
        model._modules = dict(self.model._modules)  # its own module table: the swap stays on the copy
        model.set_output_embeddings(self._full_head.to(self.model.get_input_embeddings().weight.dtype))
        return model
