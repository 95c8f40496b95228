"""Statistical helpers for losslessness tests: exact continuation laws and a merged chi-square."""

import torch
from scipy.stats import chisquare


def exact_law(target, prompt, depth, sampling):
    """Probability of every continuation of length `depth` under the target's processed law."""
    from draftsmith.infer.sampling import logits_to_probs

    law = {(): 1.0}
    for _ in range(depth):
        nxt = {}
        for seq, pr in law.items():
            with torch.inference_mode():
                logits = target.model(torch.tensor([prompt + list(seq)])).logits[0, -1]
            probs = logits_to_probs(logits[: target.vocab_size], sampling)
            for t in probs.nonzero().flatten().tolist():
                nxt[seq + (t,)] = pr * float(probs[t])
        law = nxt
    return law


def chisquare_pvalue(counts: dict, law: dict) -> float:
    """p-value of observed `counts` (outcome -> n) against `law` (outcome -> probability), rare
    cells merged so that every expected count is >= 5. An outcome outside the law's support is a
    failure in itself (KeyError)."""
    for outcome in counts:
        if counts[outcome] and outcome not in law:
            raise KeyError(f"outcome {outcome} has probability 0 under the target")
    n = sum(counts.values())
    keys = sorted(law)
    pairs = sorted(((counts.get(s, 0), law[s] * n) for s in keys), key=lambda t: t[1])
    obs_m, exp_m, acc_o, acc_e = [], [], 0, 0.0
    for o, e in pairs:
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            obs_m.append(acc_o)
            exp_m.append(acc_e)
            acc_o, acc_e = 0, 0.0
    if acc_e:
        obs_m[-1] += acc_o
        exp_m[-1] += acc_e
    exp_m = [e * n / sum(exp_m) for e in exp_m]  # float rounding: make the totals agree exactly
    return float(chisquare(obs_m, exp_m).pvalue)


def engine_samples(engine, prompt, law, sampling, n):
    """Decode `prompt` n times (seeds 0..n-1) as long as the law's outcomes; -> (counts per
    outcome, accepted drafted tokens, drafted tokens). A KeyError = a token outside the law's support."""
    depth = len(next(iter(law)))
    counts, accepted, drafted = dict.fromkeys(law, 0), 0, 0
    for seed in range(n):
        r = engine.generate(prompt, depth, sampling, seed=seed, eos_token_ids=())
        counts[tuple(r.tokens)] += 1
        accepted += r.metrics.accepted_tokens
        drafted += r.metrics.drafted_tokens
    return counts, accepted, drafted
