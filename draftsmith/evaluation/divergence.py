"""Where a greedy speculative output first differs from plain decoding's, and how close the call was.

Verifying K+1 tokens in one forward and decoding them one at a time run the same matmuls over
different row counts, so in bfloat16 (and float16) the sums round differently; where the
target's top two logits nearly tie, its own argmax can flip. That is the arithmetic, not the
drafter: in float32 greedy speculative decoding equals plain decoding token for token (the
tests check it exactly), and a report that shows a mismatch shows the margin that explains it.
"""

from __future__ import annotations

import torch


def first_divergence(target, prompts, plain, speculative) -> dict | None:
    """The first token (prompt by prompt) where `speculative` differs from `plain`, with the
    target's top-two logit margin there (one full forward over the plain prefix); None if equal."""
    for i, (prompt, a, b) in enumerate(zip(prompts, plain, speculative)):
        if a.tokens == b.tokens:
            continue
        n = min(len(a.tokens), len(b.tokens))
        pos = next((j for j in range(n) if a.tokens[j] != b.tokens[j]), n)
        ids = list(getattr(prompt, "ids", prompt)) + a.tokens[:pos]
        with torch.inference_mode():
            logits = target.model(torch.tensor([ids], device=target.device)).logits[0, -1].float()
        top = logits.topk(2).values
        return {
            "prompt": i,
            "position": pos,
            "plain_token": a.tokens[pos] if pos < len(a.tokens) else None,
            "speculative_token": b.tokens[pos] if pos < len(b.tokens) else None,
            "top2_logit_margin": float(top[0] - top[1]),
            "dtype": str(target.dtype).removeprefix("torch."),
        }
    return None


def divergence_line(d: dict) -> str:
    """One line for a report: where, by how much, and why a low-precision run may differ."""
    line = (
        f"greedy output differs from plain decoding first at token {d['position']} of prompt {d['prompt']}, "
        f"where the target's top two logits are {d['top2_logit_margin']:.3g} apart"
    )
    if d["dtype"] in ("bfloat16", "float16"):
        line += (
            f": a near-tie that verifying several tokens at once rounds differently from one-token decoding in "
            f"{d['dtype']}; in float32 the outputs are equal (--dtype float32)"
        )
    return line


__all__ = ["divergence_line", "first_divergence"]
