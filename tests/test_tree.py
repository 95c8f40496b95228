"""Token trees: construction and errors, the tree attention mask, tree verification (greedy
exactness, lossless sampling for sampled and deterministic children), and tree decoding in the
engine against plain decoding."""

import itertools
import json

import pytest
import torch
from lawtest import chisquare_pvalue, engine_samples, exact_law

from draftsmith.errors import DraftsmithError
from draftsmith.infer import Engine, SamplingConfig
from draftsmith.infer.proposal import Drafter, Proposal
from draftsmith.infer.sampling import logits_to_probs
from draftsmith.infer.tree import (
    Tree,
    TreeConfig,
    choices_from_accuracies,
    expected_acceptance_length,
    full_choices,
    load_choices,
)
from draftsmith.infer.verify import (
    greedy_chain,
    greedy_tree,
    speculative_sampling,
    tree_speculative_sampling,
    typical_acceptance,
)
from draftsmith.models import DraftLM

# --- construction ---------------------------------------------------------------------------------


def test_tree_from_choices_orders_nodes_and_links_parents():
    tree = Tree.from_choices([[1], [0, 0], [0], [0, 1], [1, 0], [0, 0, 0]])
    assert tree.paths == ((), (0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    assert tree.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert tree.depths == (0, 1, 1, 2, 2, 2, 3)
    assert tree.children[0] == (1, 2) and tree.children[1] == (3, 4)
    assert tree.num_nodes == 6 and tree.depth == 3 and not tree.is_chain
    assert tree.path_to(6) == [1, 3, 6]
    assert Tree.from_choices([[0], [0, 0]]).is_chain and Tree.chain(3).paths[-1] == (0, 0, 0)


@pytest.mark.parametrize(
    "choices, max_depth, message",
    [
        ([[0], [1, 0]], None, "no parent [1]"),
        ([[0], [0, 0], [0, 0, 0]], 2, "depth 3"),
        ([[0], [0]], None, "appears twice"),
        ([[0], [-1]], None, "negative rank"),
        ([[0], []], None, "empty path"),
        ([[0], ["a"]], None, "list of ranks"),
        ([], None, "no choices"),
    ],
)
def test_bad_tree_is_one_clear_error(choices, max_depth, message):
    with pytest.raises(DraftsmithError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Tree.from_choices(choices, max_depth=max_depth)


def test_load_choices_file(tmp_path):
    f = tmp_path / "tree.json"
    f.write_text(json.dumps([[0], [1], [0, 0]]))
    assert load_choices(f) == [(0,), (1,), (0, 0)]
    f.write_text("{not json")
    with pytest.raises(DraftsmithError, match="not JSON"):
        load_choices(f)
    with pytest.raises(DraftsmithError, match="does not exist"):
        load_choices(tmp_path / "missing.json")


def test_tree_config_validation():
    with pytest.raises(DraftsmithError, match="choices, or at least one"):
        TreeConfig()
    with pytest.raises(DraftsmithError, match="children"):
        TreeConfig(topk=2, children="beam")
    with pytest.raises(DraftsmithError, match="counts the root"):
        TreeConfig(num_draft_tokens=1)
    assert TreeConfig(topk=2, depth=3).max_nodes == 2 + 4 + 8
    assert TreeConfig(topk=4, depth=5, num_draft_tokens=10).max_nodes == 9


def _prefix_closed(paths) -> bool:
    s = set(paths)
    return all(len(p) == 1 or p[:-1] in s for p in paths)


def test_greedy_tree_search_is_optimal_for_the_independence_model():
    """Medusa's greedy construction against brute force over every prefix-closed tree."""
    acc = [[0.6, 0.2, 0.1], [0.4, 0.15, 0.05], [0.3, 0.1, 0.02]]
    universe = full_choices(2, 3)
    for size in (1, 3, 5, 7):
        best = max(
            expected_acceptance_length(Tree.from_choices(list(c)), acc)
            for c in itertools.combinations(universe, size)
            if _prefix_closed(c)
        )
        ours = choices_from_accuracies(acc, size, topk=2, depth=3)
        assert len(ours) == size and _prefix_closed(ours)
        assert expected_acceptance_length(Tree.from_choices(ours), acc) == pytest.approx(best)
    assert all(len(p) <= 2 for p in choices_from_accuracies(acc, 8, topk=3, depth=2))


# --- the tree attention mask ----------------------------------------------------------------------


def _random_tree_tokens(tree, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (tree.num_nodes,), generator=g)


@pytest.mark.parametrize("layout", ["static", "dynamic"])
def test_every_tree_node_gets_the_logits_of_its_path_alone(tiny_target, layout):
    """One forward over a tree (mask + positions) == decoding each node's path on its own."""
    tree = Tree.from_choices(choices_from_accuracies([[0.5, 0.3, 0.2], [0.4, 0.3], [0.5, 0.2]], 10))
    prompt = [5, 6, 7, 8, 9, 10, 11]
    tokens = _random_tree_tokens(tree, 200, seed=1)
    tiny_target.cache_layout = layout
    try:
        cache = tiny_target.new_cache(40)
        tiny_target.forward(torch.tensor([prompt[:-1]]), cache)
        past = cache.length
        ids = torch.cat([torch.tensor(prompt[-1:]), tokens]).unsqueeze(0)
        mask = tree.attention_mask(past, cache.kv_length(ids.shape[1]), tiny_target.dtype, "cpu")
        logits, hidden = tiny_target.forward_hidden(
            ids, cache, tree.position_ids(past, "cpu"), mask, hidden_layers=(-1, 2)
        )
        # compaction: keep the root and one deep path, then decode on: same as the path alone
        node = max(range(tree.num_nodes + 1), key=lambda i: tree.depths[i])
        path = tree.path_to(node)
        cache.compact(past, torch.tensor([past] + [past + i for i in path]))
        after = tiny_target.forward(torch.tensor([[42]]), cache)[0]
    finally:
        tiny_target.cache_layout = "static"
    for i in range(tree.num_nodes + 1):
        seq = prompt + tokens[[j - 1 for j in tree.path_to(i)]].tolist()
        with torch.inference_mode():
            out = tiny_target.model(torch.tensor([seq]), output_hidden_states=True)
        torch.testing.assert_close(logits[i], out.logits[0, -1], rtol=1e-4, atol=1e-4)
        ref_hidden = torch.cat([out.hidden_states[-1][0, -1], out.hidden_states[2][0, -1]])
        torch.testing.assert_close(hidden[i], ref_hidden, rtol=1e-4, atol=1e-4)
    seq = prompt + tokens[[j - 1 for j in path]].tolist() + [42]
    with torch.inference_mode():
        torch.testing.assert_close(after, tiny_target.model(torch.tensor([seq])).logits[0, -1], rtol=1e-4, atol=1e-4)


# --- verification: pure functions -----------------------------------------------------------------

V = 5


def _one_hot_rows(argmax, vocab=V):
    logits = torch.full((len(argmax), vocab), -5.0)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 5.0
    return logits


def test_greedy_tree_takes_the_branch_the_target_agrees_with():
    tree = Tree.from_choices([[0], [1], [0, 0], [1, 0], [1, 1], [1, 1, 0]])
    #                 nodes:   1    2    3       4       5       6
    tokens = torch.tensor([1, 2, 3, 3, 4, 0])
    # target argmax per row: after root -> 2 (node 2), after node 2 -> 4 (node 5), after node 5 -> 0 (node 6)
    path, nxt = greedy_tree(tree, tokens, _one_hot_rows([2, 0, 4, 0, 0, 0, 3]))
    assert path == [2, 5, 6] and int(nxt) == 3
    path, nxt = greedy_tree(tree, tokens, _one_hot_rows([4, 0, 0, 0, 0, 0, 0]))  # no child matches
    assert path == [] and int(nxt) == 4
    chain = Tree.chain(3)
    logits = _one_hot_rows([1, 2, 0, 4])
    assert greedy_tree(chain, torch.tensor([1, 2, 3]), logits)[0] == [1, 2]
    assert greedy_chain(torch.tensor([1, 2, 3]), logits)[0] == 2


def test_tree_sampling_with_identical_draft_accepts_the_whole_path():
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 1]])
    p = torch.zeros(tree.num_nodes + 1, V)
    p[:, 2] = 1.0  # the target is certain of token 2 everywhere
    tokens = torch.tensor([2, 3, 2, 4])
    for probs in (None, p[[0, 0, 1, 1]]):
        path, nxt = tree_speculative_sampling(tree, tokens, probs, p, torch.Generator().manual_seed(0))
        assert path == [1, 3] and int(nxt) == 2


def _target_table(seed, vocab=V, depth=3):
    """A synthetic target: p(. | prefix) for every prefix up to `depth` tokens, peaky enough."""
    g = torch.Generator().manual_seed(seed)
    return {
        pre: torch.softmax(2.0 * torch.randn(vocab, generator=g), -1)
        for d in range(depth + 1)
        for pre in itertools.product(range(vocab), repeat=d)
    }


def _sample_without_replacement(q, m, g):
    out, q = [], q.clone()
    for _ in range(m):
        x = int(torch.multinomial(q, 1, generator=g))
        out.append(x)
        q[x] = 0
        q = q / q.sum()
    return out


@pytest.mark.parametrize("children", ["deterministic", "sampled", "sampled_iid"])
def test_tree_sampling_is_lossless(children):
    """Chi-square of the first two emitted tokens against the target's own joint law, over a
    tree with 3 root children (and 2 grandchildren each), for each kind of children."""
    tree = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [1, 1], [2, 0]])
    p_table, q_table = _target_table(0), _target_table(1)
    g = torch.Generator().manual_seed(123)
    law = {(a, b): float(p_table[()][a] * p_table[(a,)][b]) for a in range(V) for b in range(V)}
    counts, accepted, n = dict.fromkeys(law, 0), 0, 6000
    for _ in range(n):
        tokens, probs = [0] * tree.num_nodes, torch.zeros(tree.num_nodes, V)
        for node in range(tree.num_nodes + 1):
            kids = tree.children[node]
            if not kids:
                continue
            prefix = tuple(tokens[j - 1] for j in tree.path_to(node))
            q = q_table[prefix]
            if children == "deterministic":  # Medusa-style top-k of the draft
                drawn = q.argsort(descending=True)[: len(kids)].tolist()
            elif children == "sampled":
                drawn = _sample_without_replacement(q, len(kids), g)
            else:
                drawn = torch.multinomial(q, len(kids), replacement=True, generator=g).tolist()
            for c, x in zip(kids, drawn):
                tokens[c - 1], probs[c - 1] = x, q
        target_probs = torch.stack(
            [p_table[tuple(tokens[j - 1] for j in tree.path_to(i))] for i in range(tree.num_nodes + 1)]
        )
        path, nxt = tree_speculative_sampling(
            tree,
            torch.tensor(tokens),
            None if children == "deterministic" else probs,
            target_probs,
            g,
            replacement=children == "sampled_iid",
        )
        emitted = [tokens[j - 1] for j in path] + [int(nxt)]
        accepted += len(path)
        if len(emitted) == 1:  # the next step starts after t1: sample it from the target directly
            emitted.append(int(torch.multinomial(p_table[(emitted[0],)], 1, generator=g)))
        counts[tuple(emitted[:2])] += 1
    assert 0.2 * n < accepted < 1.9 * n  # drafts are accepted sometimes, not always
    assert chisquare_pvalue(counts, law) > 1e-3


def test_tree_sampling_on_a_chain_is_speculative_sampling():
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(4, V, generator=torch.Generator().manual_seed(2)), -1)
    q = torch.softmax(torch.randn(3, V, generator=torch.Generator().manual_seed(3)), -1)
    tokens = torch.tensor([1, 2, 3])
    for _ in range(50):
        path, a = tree_speculative_sampling(Tree.chain(3), tokens, q, p, g1)
        n, b = speculative_sampling(tokens, q, p, g2)
        assert path == list(range(1, n + 1)) and int(a) == int(b)


def test_typical_acceptance_is_lossy_and_opt_in(tiny_target):
    tree = Tree.from_choices([[0], [1], [0, 0]])
    logits = torch.tensor([[4.0, 0, 0, 0], [0, 0, 4.0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    path, _ = typical_acceptance(tree, torch.tensor([0, 1, 2]), logits, temperature=1.0)
    assert path == [1, 3]  # token 0 then 2 are typical under peaky rows
    with pytest.raises(DraftsmithError, match="lossy"):
        Engine(tiny_target, _TreeDraft(tiny_target), 3, verification="typical")
    with pytest.raises(DraftsmithError, match="temperature"):
        Engine(tiny_target, _TreeDraft(tiny_target), 3, verification="typical-lossy").generate([5, 6], 4)


# --- the engine ------------------------------------------------------------------------------------


class _TreeDraft(Drafter):
    """A Medusa-shaped test drafter: the truncated draft's greedy chain gives one distribution
    per depth, and every node at depth d draws its children from that depth's distribution
    (deterministic top ranks, or sampled without replacement)."""

    kind = "tree_test"
    supports_trees = True

    def __init__(self, target, layers=2):
        self.model = DraftLM.truncated(target, layers).model
        self.vocab = target.vocab_size

    def start(self, prompt, max_length, hidden=None):
        pass  # stateless: every step re-reads the whole context (fine for a tiny test model)

    def accept(self, num_accepted, hidden=None):
        pass

    def propose(self, seq, k, sampling, generator, tree=None):
        t = Tree.from_choices(tree.choices)
        ids, rows = seq[0].tolist(), []
        with torch.inference_mode():  # per-depth distributions along the draft's greedy chain
            for _ in range(t.depth):
                rows.append(self.model(torch.tensor([ids])).logits[0, -1, : self.vocab])
                ids.append(int(rows[-1].argmax()))
        logits = torch.stack(rows)
        ranked, qs = [], []
        for d in range(t.depth):
            q = logits_to_probs(logits[d], sampling)
            qs.append(q)
            need = 1 + max(r for p, r in zip(t.paths, t.ranks) if len(p) == d + 1)
            if tree.children == "sampled":
                keys = torch.log(q) - torch.log(-torch.log(torch.rand(q.shape, generator=generator)))
                ranked.append(keys.argsort(descending=True)[:need])
            else:
                ranked.append((logits[d] if sampling.greedy else q).argsort(descending=True)[:need])
        tokens = torch.stack([ranked[len(p) - 1][p[-1]] for p in t.paths[1:]])
        probs = torch.stack([qs[len(p) - 1] for p in t.paths[1:]]) if tree.children == "sampled" else None
        return Proposal(tokens, probs, t)


TREES = [[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]], [[0], [1], [0, 0], [0, 0, 0], [0, 0, 1]]]


def test_greedy_tree_decoding_equals_plain_decoding(tiny_target):
    drafter = _TreeDraft(tiny_target)
    hits_off_main_branch = 0
    for choices in TREES:
        engine = Engine(tiny_target, drafter, 3, tree=TreeConfig(choices=tuple(map(tuple, choices))))
        for _seed, prompt in enumerate([[5, 6, 7], [40, 41, 42, 43, 44], list(range(60, 80))]):
            plain = engine.generate(prompt, 30, speculative=False, eos_token_ids=())
            spec = engine.generate(prompt, 30, eos_token_ids=())
            assert spec.tokens == plain.tokens
            m = spec.metrics
            assert m.drafted_tokens == m.drafts * len(choices)  # tree metrics count verified nodes
            assert 0 < m.accepted_tokens
            hits_off_main_branch += sum(1 for t, d in zip(spec.tokens, spec.from_draft) if d)
    assert hits_off_main_branch > 0


def test_tree_needs_a_tree_drafter(tiny_target):
    from draftsmith.models import load_drafter

    with pytest.raises(DraftsmithError, match="chains only"):
        Engine(tiny_target, load_drafter("truncated:2", tiny_target), 3, tree=TreeConfig(topk=2, depth=2))


@pytest.mark.parametrize("children", ["topk", "sampled"])
def test_sampled_tree_decoding_follows_the_target_distribution(tiny_target, children):
    sampling = SamplingConfig(temperature=1.0, top_k=3)
    prompt = [40, 41, 42, 43]
    tree = TreeConfig(choices=((0,), (1,), (2,), (0, 0), (0, 1), (1, 0)), children=children)
    engine = Engine(tiny_target, _TreeDraft(tiny_target), 2, tree=tree)
    law = exact_law(tiny_target, prompt, 3, sampling)
    n = 800
    counts, accepted, _ = engine_samples(engine, prompt, law, sampling, n)
    assert accepted > n / 4
    assert chisquare_pvalue(counts, law) > 1e-3
