"""A greedy mismatch is reported with where it happened and the target's logit margin there."""

import torch

from draftsmith.evaluation.divergence import divergence_line, first_divergence
from draftsmith.infer import Engine
from draftsmith.infer.engine import GenerationResult
from draftsmith.infer.metrics import SpecMetrics


def result(tokens):
    return GenerationResult(list(tokens), [], "max_new_tokens", SpecMetrics(), 1.0, 0)


def test_the_first_difference_and_its_margin(tiny_target):
    prompt = [5, 6, 7, 8]
    plain = Engine(tiny_target).generate(prompt, 6, eos_token_ids=()).tokens
    other = plain[:3] + [(plain[3] + 1) % tiny_target.vocab_size] + plain[4:]
    same = [result(plain)]
    assert first_divergence(tiny_target, [prompt], same, same) is None
    d = first_divergence(tiny_target, [prompt, prompt], [result(plain)] * 2, [result(plain), result(other)])
    assert (d["prompt"], d["position"], d["plain_token"], d["speculative_token"]) == (1, 3, plain[3], other[3])
    with torch.inference_mode():
        logits = tiny_target.model(torch.tensor([prompt + plain[:3]])).logits[0, -1].float()
    top = logits.topk(2).values
    assert abs(d["top2_logit_margin"] - float(top[0] - top[1])) < 1e-5
    assert "in float32 the outputs are equal" not in divergence_line(d)  # a float32 mismatch is not explained away
    d["dtype"] = "bfloat16"
    line = divergence_line(d)
    assert "token 3 of prompt 1" in line and "in float32 the outputs are equal" in line and "\n" not in line


def test_a_shorter_output_differs_where_it_stops(tiny_target):
    d = first_divergence(tiny_target, [[5, 6]], [result([1, 2, 3])], [result([1, 2])])
    assert d["position"] == 2 and d["plain_token"] == 3 and d["speculative_token"] is None
