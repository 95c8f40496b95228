"""Token trees: many drafted continuations verified in ONE target forward.

A tree has a root, node 0: the pending token (the target's own, not yet in its cache), and
nodes 1..n, each one drafted token whose parent is an earlier node. The target reads all n+1
tokens at once; each attends to the cached prefix and to its own ancestors only (the tree
attention mask), at position `prefix + depth` (tree position ids). Row i of the logits is then
exactly what decoding node i's path alone would give (tested in tests/test_tree.py). After
verification the accepted path is compacted in the cache with one gather (KVCache.compact).

Static trees are written as Medusa "choices" (Cai et al. 2024): each node is a path of ranks,
(0, 2) = the top-1 candidate of head 1 followed by the top-3 candidate of head 2. A chain of k
tokens is the one-branch tree (0,), (0, 0), ..., and goes through the same code.

`TreeConfig` names a tree the way SGLang's flags do: `topk` children per node, `depth`
(SGLang's num_steps) and `num_draft_tokens` (tokens verified per step, the root included).
"""

from __future__ import annotations

import heapq
import json
import numbers
import pathlib
from dataclasses import dataclass
from functools import cached_property

import torch

from draftsmith.errors import DraftsmithError


@dataclass(frozen=True)
class TreeConfig:
    """How a drafter should shape its tree. `choices` (Medusa paths) wins over the three numbers.

    children: "topk" -- each node's children are its drafter's top-ranked tokens (deterministic,
    as in Medusa and EAGLE-2); "sampled" -- drawn without replacement from the draft
    distribution (SpecInfer-style multi-draft), at temperature > 0 only.
    """

    choices: tuple[tuple[int, ...], ...] | None = None
    topk: int | None = None
    depth: int | None = None
    num_draft_tokens: int | None = None
    children: str = "topk"

    def __post_init__(self):
        if self.children not in ("topk", "sampled"):
            raise DraftsmithError(f"tree children {self.children!r}: choose topk or sampled")
        for name in ("topk", "depth", "num_draft_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise DraftsmithError(f"tree {name} must be an int >= 1 (or None), got {type(v).__name__} {v!r}")
            if v is not None and v < 1:
                raise DraftsmithError(f"tree {name} must be >= 1, got {v}")
        if self.num_draft_tokens is not None and self.num_draft_tokens < 2:
            raise DraftsmithError("tree num_draft_tokens counts the root: it must be >= 2 to draft anything")
        if self.choices is None and self.topk is None and self.depth is None and self.num_draft_tokens is None:
            raise DraftsmithError("a tree needs choices, or at least one of topk / depth / num_draft_tokens")

    @property
    def max_nodes(self) -> int:
        """An upper bound on drafted nodes per step (what the caches must leave room for)."""
        if self.choices is not None:
            return len(self.choices)
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens - 1
        topk, depth = self.topk or 1, self.depth or 1
        return sum(topk**d for d in range(1, depth + 1))


class Tree:
    """An immutable token tree: node 0 is the root, nodes 1..n sorted by depth then path."""

    def __init__(self, paths: list[tuple[int, ...]]):
        """`paths`: the ranks path of every non-root node, parents before children (see from_choices)."""
        self.paths: tuple[tuple[int, ...], ...] = ((),) + tuple(paths)
        index = {p: i for i, p in enumerate(self.paths)}
        self.parents = (-1,) + tuple(index[p[:-1]] for p in paths)
        self.depths = tuple(len(p) for p in self.paths)
        self.ranks = (0,) + tuple(p[-1] for p in paths)
        kids: list[list[int]] = [[] for _ in self.paths]
        for i, parent in enumerate(self.parents[1:], start=1):
            kids[parent].append(i)
        # Children in rank order: verification tries the most likely candidate first.
        self.children = tuple(tuple(sorted(c, key=lambda i: self.ranks[i])) for c in kids)

    # --- construction --------------------------------------------------------------------------

    @classmethod
    def from_choices(cls, choices, max_depth: int | None = None, what: str = "tree") -> Tree:
        """A tree from Medusa-style choices; a missing parent, a duplicate, a negative rank or a
        path deeper than `max_depth` (e.g. the number of heads) is one DraftsmithError."""
        paths = []
        for c in choices:
            if isinstance(c, int) or not all(isinstance(r, int) and not isinstance(r, bool) for r in c):
                raise DraftsmithError(f"{what}: every choice is a list of ranks (ints), got {c!r}")
            paths.append(tuple(c))
        if not paths:
            raise DraftsmithError(f"{what}: no choices")
        seen = set()
        for p in paths:
            if not p:
                raise DraftsmithError(f"{what}: an empty path; the root is implicit")
            if min(p) < 0:
                raise DraftsmithError(f"{what}: path {list(p)} has a negative rank")
            if p in seen:
                raise DraftsmithError(f"{what}: path {list(p)} appears twice")
            seen.add(p)
            if max_depth is not None and len(p) > max_depth:
                raise DraftsmithError(
                    f"{what}: path {list(p)} has depth {len(p)} but the drafter predicts at most {max_depth} tokens "
                    "ahead"
                )
        for p in paths:
            if len(p) > 1 and p[:-1] not in seen:
                raise DraftsmithError(f"{what}: path {list(p)} has no parent {list(p[:-1])} in the tree")
        return cls(sorted(paths, key=lambda p: (len(p), p)))

    @classmethod
    def chain(cls, k: int) -> Tree:
        return cls([(0,) * d for d in range(1, k + 1)])

    # --- shape -----------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        """Drafted nodes, the root excluded (what metrics count as drafted tokens)."""
        return len(self.paths) - 1

    @property
    def depth(self) -> int:
        return max(self.depths)

    @cached_property
    def is_chain(self) -> bool:
        return all(len(c) <= 1 for c in self.children)

    def path_to(self, node: int) -> list[int]:
        """Nodes from depth 1 down to `node` (the root excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    @cached_property
    def ancestor_matrix(self) -> torch.Tensor:
        """[n+1, n+1] bool: row i attends column j iff j is i or an ancestor of i."""
        n = len(self.paths)
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            j = i
            while j >= 0:
                m[i, j] = True
                j = self.parents[j]
        return m

    def attention_mask(self, past: int, kv_length: int, dtype: torch.dtype, device) -> torch.Tensor:
        """Additive 4D mask [1, 1, n+1, kv_length] for a forward that writes the tree at `past`.

        Additive (0 / dtype min) rather than boolean: transformers uses a 4D mask as given, and
        the eager attention path adds it to the scores while SDPA accepts either.
        """
        q = len(self.paths)
        mask = torch.full((q, kv_length), torch.finfo(dtype).min, dtype=dtype, device=device)
        mask[:, :past] = 0
        anc = self._ancestors_on(device)
        mask[:, past : past + q].masked_fill_(anc, 0)
        return mask.view(1, 1, q, kv_length)

    def _ancestors_on(self, device) -> torch.Tensor:
        cache = self.__dict__.setdefault("_anc_by_device", {})
        key = str(device)
        if key not in cache:
            cache[key] = self.ancestor_matrix.to(device)
        return cache[key]

    def position_ids(self, past: int, device) -> torch.Tensor:
        cache = self.__dict__.setdefault("_depths_by_device", {})
        key = str(device)
        if key not in cache:
            cache[key] = torch.tensor(self.depths, dtype=torch.long, device=device)
        return (cache[key] + past).unsqueeze(0)

    def __len__(self) -> int:
        return self.num_nodes

    def __repr__(self) -> str:
        return f"Tree(nodes={self.num_nodes}, depth={self.depth}, chain={self.is_chain})"


def expected_acceptance_length(tree: Tree, accuracies) -> float:
    """E[tokens per step] = 1 + Σ_nodes Π_{edges on its path} accuracies[depth-1][rank]
    (Medusa, Cai et al. 2024, §3.3.2: each node counts if its whole path is accepted)."""
    total = 1.0
    for path in tree.paths[1:]:
        prob = 1.0
        for d, r in enumerate(path):
            row = accuracies[d] if d < len(accuracies) else []
            prob *= row[r] if r < len(row) else 0.0
        total += prob
    return total


def choices_from_accuracies(
    accuracies, num_nodes: int, topk: int | None = None, depth: int | None = None
) -> list[tuple[int, ...]]:
    """Medusa's greedy tree search: repeatedly add the node that raises the expected acceptance
    length most, i.e. the frontier path with the largest Π accuracies[d][rank].

    accuracies[d][r]: measured probability that head d+1's rank-r candidate is the right token.
    Because the product only shrinks going down, the greedy frontier expansion yields the
    optimal tree of `num_nodes` nodes for this independence model, always prefix-closed.
    """
    depth = min(depth or len(accuracies), len(accuracies))
    width = topk or max(len(a) for a in accuracies)
    if depth < 1 or num_nodes < 1:
        raise DraftsmithError("a tree needs depth >= 1 and at least one node")
    heap = [(-_acc(accuracies, 0, r), (r,)) for r in range(min(width, len(accuracies[0])))]
    heapq.heapify(heap)
    chosen: list[tuple[int, ...]] = []
    while heap and len(chosen) < num_nodes:
        neg, path = heapq.heappop(heap)
        chosen.append(path)
        d = len(path)
        if d < depth:
            for r in range(min(width, len(accuracies[d]))):
                heapq.heappush(heap, (neg * _acc(accuracies, d, r), path + (r,)))
    return chosen


def _acc(accuracies, d: int, r: int) -> float:
    return float(accuracies[d][r]) if r < len(accuracies[d]) else 0.0


def full_choices(topk: int, depth: int) -> list[tuple[int, ...]]:
    """Every path of `topk` children per node down to `depth` (topk**1 + ... + topk**depth nodes)."""
    out, frontier = [], [()]
    for _ in range(depth):
        frontier = [p + (r,) for p in frontier for r in range(topk)]
        out += frontier
    return out


def load_choices(path) -> list[tuple[int, ...]]:
    """Choices from a JSON file: a list of paths, e.g. [[0], [1], [0, 0]] (Medusa's format)."""
    p = pathlib.Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise DraftsmithError(f"tree choices file {p} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DraftsmithError(f"tree choices file {p}: not JSON ({e})") from None
    if isinstance(data, dict) and "choices" in data:
        data = data["choices"]
    if not isinstance(data, list) or not all(isinstance(c, list) for c in data):
        raise DraftsmithError(f"tree choices file {p}: expected a JSON list of paths such as [[0], [1], [0, 0]]")
    return [tuple(c) for c in data]


__all__ = [
    "Tree",
    "TreeConfig",
    "choices_from_accuracies",
    "expected_acceptance_length",
    "full_choices",
    "load_choices",
]
