"""`medusa`: K extra decoding heads on the target's last hidden state.

Medusa (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple
Decoding Heads"). The target's own LM head turns its last hidden state h_t into token t+1 (the
pending token); head k (k = 1..K) turns the same h_t into a guess for token t+k+1:

    head_k(h) = W_k · ResBlock_k(h),   ResBlock(x) = x + SiLU(A x + b)

with A, b initialised to zero and W_k copied from the target's LM head, so an untrained head
predicts what the LM head predicts from h (paper, sec. 2.1.1). With `share_lm_head` every head
uses the target's LM head itself (not a copy: never saved, never trained).

Drafting costs one small matmul per head and no forward of any model, and since head k does not
depend on the tokens drafted before it, a tree of candidates (ranked per head, sec. 2.1.2) costs
nothing more to draft. Medusa-1 trains the heads on a frozen target; Medusa-2 trains them jointly
with the target (LoRA), see train/tasks/medusa.py.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from draftsmith.errors import DraftsmithError
from draftsmith.infer.proposal import Proposal, check_num_speculative_tokens
from draftsmith.infer.sampling import SamplingConfig, logits_to_probs, sample
from draftsmith.infer.tree import Tree, TreeConfig, choices_from_accuracies, full_choices

from .base import TrainedDrafter
from .weights import check_draft_sizes, load_draft_weights, register_config

log = logging.getLogger(__name__)

NUM_RANKS = 10  # head_accuracies keeps ranks 0..9 per head (Medusa's tree search needs no more)


class MedusaConfig(PretrainedConfig):
    model_type = "draftsmith_medusa"

    def __init__(
        self,
        hidden_size: int = 64,
        vocab_size: int = 32000,
        num_heads: int = 4,
        num_layers: int = 1,
        share_lm_head: bool = False,
        target: str = "",
        head_accuracies: list[list[float]] | None = None,
        medusa_version: int = 1,
        **kwargs,
    ):
        kwargs.setdefault("tie_word_embeddings", False)  # no input embeddings to tie to
        super().__init__(**kwargs)
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.num_heads, self.num_layers, self.share_lm_head = num_heads, num_layers, share_lm_head
        self.target = target
        # head_accuracies[k-1][r]: measured P(head k's rank-r candidate is the right token).
        self.head_accuracies = head_accuracies
        self.medusa_version = medusa_version


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); zero-initialised, so it starts as the identity."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(PreTrainedModel):
    """The K heads alone: the target's weights never appear in this module's state dict."""

    config_class = MedusaConfig
    base_model_prefix = "medusa"
    main_input_name = "hidden"

    def __init__(self, config: MedusaConfig):
        super().__init__(config)
        d, v = config.hidden_size, config.vocab_size
        self.blocks = nn.ModuleList(
            nn.Sequential(*[ResBlock(d) for _ in range(config.num_layers)]) for _ in range(config.num_heads)
        )
        if not config.share_lm_head:
            self.lm_heads = nn.ModuleList(nn.Linear(d, v, bias=False) for _ in range(config.num_heads))
        self.__dict__["_shared_lm_head"] = None
        self.post_init()

    def _init_weights(self, module):
        # Called by transformers for modules it did not load. Blocks start as the identity; a
        # fresh unembedding gets a small normal init (from_target overwrites it with the target's).
        if isinstance(module, ResBlock):
            module.reset_parameters()
        elif isinstance(module, nn.Linear) and module.out_features == self.config.vocab_size:
            with torch.no_grad():
                module.weight.normal_(0.0, 0.02)

    def get_input_embeddings(self):
        return None

    def get_output_embeddings(self):
        return None

    @classmethod
    def from_target(
        cls, target_model, num_heads: int = 4, num_layers: int = 1, share_lm_head: bool = False, target_name: str = ""
    ) -> MedusaHeads:
        """Fresh heads (fp32, CPU) for a transformers causal LM: unembeddings copied from its LM head."""
        head = target_model.get_output_embeddings()
        vocab, hidden = head.weight.shape
        config = MedusaConfig(
            hidden_size=hidden,
            vocab_size=vocab,
            num_heads=num_heads,
            num_layers=num_layers,
            share_lm_head=share_lm_head,
            target=target_name,
        )
        heads = cls(config)
        with torch.no_grad():
            if share_lm_head:
                heads.attach_lm_head(head)
            else:
                for lm in heads.lm_heads:
                    lm.weight.copy_(head.weight.detach().float())
        return heads.float()

    def attach_lm_head(self, module: nn.Module) -> None:
        """Use the target's LM head for every head, without registering it (never saved/trained)."""
        if tuple(module.weight.shape) != (self.config.vocab_size, self.config.hidden_size):
            raise DraftsmithError(
                f"the target's LM head is {tuple(module.weight.shape)}, these medusa heads need "
                f"({self.config.vocab_size}, {self.config.hidden_size})"
            )
        self.__dict__["_shared_lm_head"] = module

    @property
    def shared_lm_head(self) -> nn.Module | None:
        return self.__dict__.get("_shared_lm_head")

    def head_logits(self, hidden: torch.Tensor, k: int) -> torch.Tensor:
        """Head k's logits (0-based k) for hidden [..., d] -> [..., V]."""
        x = self.blocks[k](hidden)
        if not self.config.share_lm_head:
            return self.lm_heads[k](x)
        shared = self.shared_lm_head
        if shared is None:
            raise DraftsmithError(
                "these medusa heads share the target's LM head: call attach_lm_head(target LM head) first"
            )
        return F.linear(x, shared.weight.to(x.dtype))

    def forward(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """hidden [..., d] -> logits [K, ..., V] (the first `num_heads` heads only, if given)."""
        n = self.config.num_heads if num_heads is None else num_heads
        return torch.stack([self.head_logits(hidden, k) for k in range(n)])


def prior_accuracies(num_heads: int) -> list[list[float]]:
    """A stand-in for measured accuracies: deeper heads and lower ranks are right less often."""
    return [[0.6 ** (d + 1) * 0.5**r for r in range(NUM_RANKS)] for d in range(num_heads)]


class Medusa(TrainedDrafter):
    """The runtime drafter: reads the target's last hidden state, drafts a chain or a tree."""

    kind = "medusa"
    needs_hidden_states = True
    hidden_layers = (-1,)
    supports_trees = True

    def __init__(self, heads: MedusaHeads, target, name: str, freeze: bool = True):
        super().__init__(heads, target, name, freeze)
        self.heads = self.model
        c = heads.config
        self.num_heads = self.max_speculative_tokens = c.num_heads
        check_draft_sizes(c, target, f"medusa heads {name}")
        if c.share_lm_head and heads.shared_lm_head is None:
            heads.attach_lm_head(target.model.get_output_embeddings())
        # A compiled target (CUDA): the heads' forward is compiled too. Its input is always one
        # row [1, d], so there is one graph per head count (a chain's k, a tree's depth).
        self._forward = self.compiled(heads.forward) or heads.forward
        self._hidden: torch.Tensor | None = None  # [1, d]: the row that produced the pending token
        self._trees: dict = {}
        self._warned_no_hidden = False

    @classmethod
    def from_pretrained(cls, folder, target) -> Medusa:
        what = f"medusa heads in {folder}"
        heads = load_draft_weights(MedusaHeads, folder, target, what, lambda c: check_draft_sizes(c, target, what))
        return cls(heads, target, str(folder))

    # --- the engine's interface --------------------------------------------------------------

    def start(self, prompt: torch.Tensor, max_length: int, hidden: torch.Tensor | None = None) -> None:
        self._hidden = None if hidden is None else hidden[-1:]

    def accept(self, num_accepted: int, hidden: torch.Tensor | None = None) -> None:
        self._hidden = None if hidden is None else hidden[-1:]

    def propose(
        self, seq: torch.Tensor, k: int, sampling: SamplingConfig, generator=None, tree: TreeConfig | None = None
    ) -> Proposal:
        if tree is None:
            check_num_speculative_tokens(k, self.num_heads, f"medusa heads {self.name} ({self.num_heads} heads)")
            with torch.no_grad():
                logits = self._logits(seq, k)  # [k, V]
            if sampling.greedy:
                return Proposal(logits.argmax(-1), None)
            q = logits_to_probs(logits, sampling)
            return Proposal(sample(q, generator), q)
        return self._propose_tree(seq, sampling, generator, tree)

    # --- drafting ----------------------------------------------------------------------------

    def _logits(self, seq: torch.Tensor, num_heads: int) -> torch.Tensor:
        h = self._hidden if self._hidden is not None else self._recompute_hidden(seq)
        p = next(self.heads.parameters())
        return self._forward(h.to(device=p.device, dtype=p.dtype), num_heads)[:, 0]

    def _recompute_hidden(self, seq: torch.Tensor) -> torch.Tensor:
        """Fallback for a caller that passes no hidden states: one uncached target forward over
        everything but the pending token (correct, but slow)."""
        if not self._warned_no_hidden:
            log.warning(
                "medusa: no hidden states were passed; recomputing them with a full target forward per step (slow)"
            )
            self._warned_no_hidden = True
        out = self.target.model(input_ids=seq[:, :-1], output_hidden_states=True, use_cache=False)
        return out.hidden_states[-1][0, -1:]

    def max_tree_nodes(self, cfg: TreeConfig) -> int:
        """Nodes the tree for `cfg` has (what the engine's caches must leave room for)."""
        return self.tree_for(cfg).num_nodes

    def tree_for(self, cfg: TreeConfig) -> Tree:
        """The static tree for `cfg`, built once: Medusa choices, or the greedy search over the
        heads' measured accuracies (paper, sec. 3.3.2) down to `depth`, `num_draft_tokens` nodes."""
        key = repr(cfg)
        if key not in self._trees:
            self._trees[key] = self._build_tree(cfg)
        return self._trees[key]

    def _build_tree(self, cfg: TreeConfig) -> Tree:
        K = self.num_heads
        if cfg.choices:
            return Tree.from_choices(cfg.choices, max_depth=K, what="medusa tree")
        depth = cfg.depth or K
        if depth > K:
            raise DraftsmithError(
                f"tree depth {depth}: this medusa checkpoint has {K} heads, so it drafts at most {K} tokens ahead"
            )
        acc = self.heads.config.head_accuracies
        if not acc:
            log.warning(
                "medusa %s: no measured head accuracies in the checkpoint; shaping the tree from a prior", self.name
            )
            acc = prior_accuracies(K)
        num_nodes = cfg.num_draft_tokens - 1 if cfg.num_draft_tokens else len(full_choices(cfg.topk or 1, depth))
        choices = choices_from_accuracies(acc, num_nodes, cfg.topk, depth)
        return Tree.from_choices(choices, max_depth=K, what="medusa tree")

    def _propose_tree(self, seq, sampling: SamplingConfig, generator, cfg: TreeConfig) -> Proposal:
        if cfg.children == "sampled" and sampling.greedy:
            raise DraftsmithError("tree children 'sampled' needs temperature > 0; at greedy use topk children")
        tree = self.tree_for(cfg)
        depth = tree.depth
        need = self._tree_index(tree)[0]
        with torch.no_grad():
            logits = self._logits(seq, depth)  # [depth, V]
        q = None if sampling.greedy else logits_to_probs(logits, sampling)
        if cfg.children == "topk":
            scores = logits if q is None else q
            ranking = torch.topk(scores, max(need), dim=-1).indices  # [depth, max rank]
        else:
            # Gumbel-top-k: the order of log q + Gumbel noise is a without-replacement sample from q.
            u = torch.rand(q.shape, generator=generator, device=q.device).clamp_(1e-20, 1.0)
            keys = q.log() - (-u.log()).log()
            ranking = torch.topk(keys, max(need), dim=-1).indices
            available = (q > 0).sum(-1).tolist()
            if any(available[d] < need[d] for d in range(depth)):
                tree = self._pruned(tree, available)  # never draft a token q cannot produce
        _, depths, ranks = self._tree_index(tree)
        tokens = ranking[depths, ranks]
        probs = None if cfg.children == "topk" else q[depths]
        return Proposal(tokens.to(self.target.device), probs, tree=tree)

    def _tree_index(self, tree: Tree):
        """Per tree, computed once (not per decode step): candidates needed per head (highest rank
        used at that depth + 1) and, per node, its head (depth - 1) and rank as index tensors."""
        key = ("index", id(tree))  # trees live in self._trees, so their ids stay valid
        if key not in self._trees:
            need = [0] * tree.depth
            for path in tree.paths[1:]:
                need[len(path) - 1] = max(need[len(path) - 1], path[-1] + 1)
            device = next(self.heads.parameters()).device  # where the heads' rankings are
            depths = torch.tensor(tree.depths[1:], device=device) - 1
            self._trees[key] = (need, depths, torch.tensor(tree.ranks[1:], device=device))
        return self._trees[key]

    def _pruned(self, tree: Tree, available: list[int]) -> Tree:
        """`tree` without the nodes whose rank exceeds what head d can sample (top-k/top-p cut q)."""
        key = (id(tree), tuple(available))
        if key not in self._trees:
            keep = [p for p in tree.paths[1:] if all(r < available[d] for d, r in enumerate(p))]
            self._trees[key] = Tree(keep)
        return self._trees[key]


register_config(MedusaConfig)

__all__ = ["Medusa", "MedusaConfig", "MedusaHeads", "ResBlock", "prior_accuracies"]
