"""`pard`: PARD, a target-independent draft LM that proposes K tokens in ONE forward.

PARD (An et al. 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model
Adaptation", arXiv 2504.18583) adapts an ordinary autoregressive draft LM (same tokenizer as the
target, no target hidden states) so that, fed the context followed by K-1 copies of a mask token
`m`, its K last positions predict the next K tokens at once (the paper's eq. 2/3):

    q_1..q_K = draft(x_1..x_n, m, ..., m)      q_i ≈ p(x_{n+i} | x_1..x_n)

so drafting costs one forward instead of K. Training (train/tasks/pard.py) teaches the mask positions
this with the paper's conditional drop-token strategy.

A checkpoint is a plain transformers causal-LM folder (what engines load) whose config.json also
carries the mask token id as `pard_token`: the key PARD's reference trainer writes
(`model.config.pard_token`, AMD-AIG-AIMA/PARD pard/pard_train.py) and vLLM's parallel drafting
reads (vllm/v1/spec_decode/llm_base_proposer.py `_init_parallel_drafting_params`).

The mask token is an id INSIDE the existing vocabulary that text never produces (a spare
embedding row past the tokenizer, a reserved special token): growing the vocabulary by one would
break "draft vocab_size == target vocab_size", which vLLM enforces for `draft_model`
(config/speculative.py `verify_equal_vocab_size_if_draft_model`). PARD's reference recipes do the
same: Qwen2.5 uses 151665 (the first padding row past its 151,665-token tokenizer), Llama 3 uses
128020 (`<|reserved_special_token_12|>`). See `choose_mask_token`.
"""

from __future__ import annotations

import json
import pathlib
import re

import torch

from draftsmith.errors import DraftsmithError
from draftsmith.infer.cache import CachePool, KVCache
from draftsmith.infer.proposal import Proposal
from draftsmith.infer.sampling import SamplingConfig, logits_to_probs, sample

from .base import TrainedDrafter
from .draft_lm import load_draft_model
from .sources import require_config
from .target import last_rows

MASK_KEY = "pard_token"  # config.json key: PARD's reference and vLLM's parallel drafting


def choose_mask_token(tokenizer, vocab_size: int, spec: str | int = "auto") -> int:
    """The mask token id for a draft with `vocab_size` embedding rows and `tokenizer`.

    spec: an id ("258" or 258), a token string the tokenizer knows ("<|reserved_special_token_0|>"),
    or "auto", which takes, in order of preference:
      1. the first spare embedding row past the tokenizer (PARD's Qwen2.5 choice, 151665): no text
         ever encodes to it, and its embedding is free to learn the mask;
      2. the first reserved special token (PARD's Llama 3 choice: a `<|reserved_special_token_N|>`);
      3. the last added special token that is neither bos/eos/pad/unk nor used by the chat template
         (SmolLM2: `<empty_output>`, a Jupyter marker a chat never contains).
    Refused: ids outside the vocabulary (vLLM indexes the embedding with it) and bos/eos/pad/unk.
    """
    specials = {getattr(tokenizer, a, None) for a in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")}
    specials.discard(None)
    if str(spec) != "auto":
        text = str(spec)
        if re.fullmatch(r"\d+", text):
            token_id = int(text)
        else:
            token_id = tokenizer.convert_tokens_to_ids(text)
            if token_id is None or tokenizer.convert_ids_to_tokens(token_id) != text:
                raise DraftsmithError(
                    f"PARD mask token {text!r} is not a token of the target's tokenizer: give an id or a known token"
                )
        check_mask_token(token_id, vocab_size, tokenizer)
        return token_id
    n_tok = len(tokenizer)
    if vocab_size > n_tok:
        return n_tok
    added = sorted(getattr(tokenizer, "added_tokens_decoder", {}).items())
    for token_id, tok in added:
        if "reserved" in str(tok) and token_id not in specials and token_id < vocab_size:
            return token_id
    template = str(getattr(tokenizer, "chat_template", "") or "")
    for token_id, tok in reversed(added):
        if token_id not in specials and token_id < vocab_size and str(tok) not in template:
            return token_id
    raise DraftsmithError(
        f"PARD needs a mask token the text never uses, and this tokenizer has none spare (vocabulary {vocab_size}, "
        f"all rows used; no reserved or unused special token): set drafter.mask_token to a rarely used token id "
        f"(e.g. a byte that UTF-8 text never contains)"
    )


def check_mask_token(token_id: int, vocab_size: int, tokenizer=None) -> None:
    if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < vocab_size:
        raise DraftsmithError(
            f"PARD mask token {token_id!r} is outside the vocabulary [0, {vocab_size - 1}]: "
            "it must be an existing id (vLLM checks draft and target vocab sizes are equal)"
        )
    if tokenizer is not None:
        for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
            if getattr(tokenizer, attr, None) == token_id:
                raise DraftsmithError(
                    f"PARD mask token {token_id} is the tokenizer's {attr[:-3]}: pick an id text never uses"
                )


class Pard(TrainedDrafter):
    """PARD behind the engine's `Drafter` interface (infer/proposal.py).

    The draft's KV cache holds the context it has seen. propose() feeds what it has not seen yet
    (the pending token, plus any drafted tokens the target accepted last step) followed by k-1
    mask tokens, reads k next-token distributions off the last k positions, then crops the
    masks' keys/values: they encode "unknown token here" and must not become context. Drafted
    tokens are never fed (a mask stood in their place), so accept() has nothing to roll back:
    the accepted ones arrive as unseen tokens of the next propose(). This is the bookkeeping of
    PARD's reference loop (pard/pard_infer.py: remove `draft_k - 1` KV entries, feed the kept
    tokens) and of vLLM's draft_model + parallel_drafting input layout
    ([context..., bonus, mask x (K-1)], positions unshifted: v1/spec_decode/utils.py
    `copy_and_expand_eagle_inputs`).
    """

    kind = "pard"
    needs_hidden_states = False
    fusable = True

    def __init__(self, model, target, name: str, mask_token_id: int | None = None, freeze: bool = True):
        super().__init__(model, target, name, freeze)
        if mask_token_id is None:
            mask_token_id = getattr(model.config, MASK_KEY, None)
        if mask_token_id is None:
            raise DraftsmithError(f"{name}: no `{MASK_KEY}` in the draft's config: not a PARD checkpoint")
        check_mask_token(int(mask_token_id), model.get_input_embeddings().weight.shape[0])
        self.mask_token_id = int(mask_token_id)
        self.cache: KVCache | None = None
        self.forwards = 0  # draft forwards since construction (one per propose, plus start's prefill)
        # Compiled with the target (CUDA): a propose() forward feeds the n+1 tokens the last step
        # kept plus k-1 masks, k..2k shapes over a static cache (one CUDA graph each); prefill eager.
        self._compiled = self.compiled(self.model.forward)

    @classmethod
    def from_pretrained(cls, folder: str, target) -> Pard:
        """Load a PARD checkpoint (a causal-LM folder with `pard_token` in config.json) for `target`."""
        path = pathlib.Path(folder)
        if path.is_dir():
            require_config(path)
            config = json.loads((path / "config.json").read_text())
            if MASK_KEY not in config:
                raise DraftsmithError(
                    f"{folder}: config.json has no `{MASK_KEY}`: not a PARD checkpoint (a plain draft LM? "
                    "load it as draft_lm, or train it with a pard recipe)"
                )
        model = load_draft_model(folder, target)
        if model.config.vocab_size != target.model.config.vocab_size:
            raise DraftsmithError(
                f"{folder}: vocabulary size {model.config.vocab_size}, the target {target.name} has "
                f"{target.model.config.vocab_size} (PARD's mask token lives inside the shared vocabulary)"
            )
        drafter = cls(model, target, folder)
        trained = _trained_k(path)
        if trained:
            drafter.max_speculative_tokens = trained  # the trainer's acceptance eval stays within what was trained
        return drafter

    def start(self, prompt: torch.Tensor, max_length: int, hidden=None) -> None:
        # this draft's cache of that length, reset, if it has one: graphs over it replay
        pool = self.__dict__.get("_cache_pool")
        if pool is None:  # compiled: a few length buckets; eager: lengths vary, keep the last
            pool = self.__dict__["_cache_pool"] = CachePool(keep=4 if self._compiled is not None else 1)
        self.cache = pool.get(max_length, lambda: KVCache(self.model.config, max_length))
        self._forward(prompt, 1, decode=False)

    def _forward(self, ids: torch.Tensor, keep: int, decode: bool = True) -> torch.Tensor:
        """Feed ids [1, q] into the draft's cache; logits [keep, V_target] of the last `keep` positions."""
        q = ids.shape[1]
        pos = torch.arange(self.cache.length, self.cache.length + q, device=ids.device).unsqueeze(0)
        self.forwards += 1
        fused = self.fused_forward() if self.cache.layout == "static" else None
        if fused is not None:  # the context and masks attend causally, as in transformers' forward
            logits, _ = fused(ids, self.cache, pos, None, last_rows(keep, q, ids.device), None)
            self.cache.advance(q, by_transformers=False)
            return self._in_target_vocab(logits[-keep:])
        if decode and self._compiled is not None:  # every row's logits: one fixed shape per q
            forward, rows = self._compiled, 0
        else:
            forward, rows = self.model, last_rows(keep, q, ids.device)
        out = forward(
            input_ids=ids,
            **self.cache.forward_kwargs(self.model),
            position_ids=pos,
            use_cache=True,
            logits_to_keep=rows,
        )
        self.cache.advance(q)
        return self._in_target_vocab(out.logits[0, -keep:])

    def _in_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits [keep, V_draft] over the target's vocabulary (the same tokenizer, but the
        embedding matrices may be padded differently)."""
        keep = logits.shape[0]
        v = self.target_vocab
        if logits.shape[-1] > v:
            logits = logits[:, :v]
        elif logits.shape[-1] < v:
            logits = torch.cat([logits, logits.new_full((keep, v - logits.shape[-1]), float("-inf"))], -1)
        return logits

    def propose(self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree=None) -> Proposal:
        if k <= 0:
            return Proposal(seq[0, :0])
        n = seq.shape[1]
        if self.cache.length >= n:  # nothing new (a repeated call): re-feed the last token
            self.cache.crop(n - 1)
        masks = torch.full((1, k - 1), self.mask_token_id, dtype=seq.dtype, device=seq.device)
        ids = torch.cat([seq[:, self.cache.length :], masks], 1)
        logits = self._forward(ids, k)  # ONE forward: row i predicts the token i+1 places after seq
        self.cache.crop(n)  # drop the masks' keys/values
        probs = logits_to_probs(logits, sampling)
        tokens = logits.argmax(-1) if sampling.greedy else sample(probs, generator)
        # Each d_i is drawn from q_i, which does not depend on d_1..d_{i-1} (masks stood in their
        # place): q_i is exactly the distribution lossless verification must divide by.
        return Proposal(tokens, None if sampling.greedy else probs)

    def accept(self, num_accepted: int, hidden=None) -> None:
        # The cache holds exactly the context seen at propose(); accepted drafts and the target's
        # next token are fed, as unseen tokens, by the next propose().
        pass

    def as_assistant_model(self):
        """The underlying transformers model (an ordinary causal LM; assisted generation drafts
        with it autoregressively, feeding no mask tokens)."""
        return self.model


def _trained_k(folder: pathlib.Path) -> int | None:
    meta = folder / "drafter.json"
    if not meta.is_file():
        return None
    try:
        k = json.loads(meta.read_text()).get("num_speculative_tokens")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None
    return int(k) if isinstance(k, int) and k > 0 else None
