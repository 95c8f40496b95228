"""EAGLE-2 dynamic trees read the device once per tree level: every read-back is a device sync,
and at a few-millisecond GPU step the host waiting on each frontier node cost more than the
draft's forwards."""

import torch

from draftsmith.infer import Engine
from draftsmith.infer.sampling import GREEDY
from draftsmith.infer.tree import TreeConfig
from draftsmith.models.eagle import EagleConfig
from draftsmith.models.eagle3 import Eagle3, Eagle3Config, Eagle3Model, default_aux_layers


def eagle3(target):
    c = target.config
    torch.manual_seed(0)
    model = Eagle3Model(
        Eagle3Config(
            vocab_size=target.vocab_size,
            draft_vocab_size=128,
            hidden_layers=default_aux_layers(c.num_hidden_layers),
            **EagleConfig.layer_fields(c),
        )
    )
    model.set_vocab(torch.arange(0, 256, 2), target.model.get_output_embeddings())
    return Eagle3(model, target, "untrained")


def test_one_read_back_per_tree_level_and_outputs_equal_plain(tiny_target, monkeypatch):
    drafter = eagle3(tiny_target)
    prompt = [5, 6, 7, 8, 9]
    plain = Engine(tiny_target).generate(prompt, 16, eos_token_ids=()).tokens
    cfg = TreeConfig(topk=3, depth=4, num_draft_tokens=12)
    engine = Engine(tiny_target, drafter, 3, tree=cfg)
    assert engine.generate(prompt, 16, eos_token_ids=()).tokens == plain

    reads, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append(t.shape) or tolist(t))
    seq = torch.tensor([prompt])
    hidden = tiny_target.forward_hidden(seq[:, :-1], tiny_target.new_cache(64), hidden_layers=drafter.hidden_layers)[1]
    drafter.start(seq, 64, hidden=hidden)
    proposal = drafter.propose(seq, 3, GREEDY, None, tree=cfg)
    assert len(reads) == cfg.depth  # the root's children, then one per deeper level
    assert proposal.tokens.shape[0] == cfg.num_draft_tokens - 1
