#!/usr/bin/env python
"""Benchmark one target/draft pair over several K and prompt sets in one process.

Loads the models once, runs `draftsmith bench`'s measurement (draftsmith/bench.py: plain, ours,
transformers' plain and assisted generate, interleaved per prompt) for every (prompt set, K),
prints one table and writes all results to one JSON (plus a per-position acceptance plot).

    python scripts/bench_matrix.py --target qwen2.5-coder-1.5b-instruct \\
        --draft qwen2.5-coder-0.5b-instruct --ks 2,4,6 --prompt-sets chat,code \\
        --num-prompts 4 --max-new-tokens 64 --out runs/bench/qwen_pair
"""

import argparse
import os
import sys
import time

from draftsmith.infer.sampling import SamplingConfig
from draftsmith.models import Target
from draftsmith.train.kinds import load_drafter

from draftsmith.bench import environment, plot_acceptance, run_bench, write_json
from draftsmith.errors import run_command
from draftsmith.prompts import load_prompts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument("--draft", required=True)
    ap.add_argument("--ks", default="2,4,6")
    ap.add_argument("--prompt-sets", default="chat,code")
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench/matrix")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    target = Target.load(args.target, dtype=args.dtype)
    drafter = load_drafter(args.draft, target)
    sampling = SamplingConfig(temperature=args.temperature)
    rows, results = [], {}
    t0 = time.time()
    for set_name in args.prompt_sets.split(","):
        prompts = load_prompts(set_name, target.tokenizer, args.num_prompts)
        for i, k in enumerate(int(x) for x in args.ks.split(",")):
            # transformers' plain generate() only needs measuring once per prompt set
            baselines = ("hf_plain", "hf_assisted") if i == 0 else ("hf_assisted",)
            r = run_bench(
                target, drafter, prompts, k, args.max_new_tokens, sampling, args.seed, baselines, progress=False
            )
            results[f"{set_name}/k={k}"] = r
            rows.append((set_name, k, r))
            print(
                f"[{time.time() - t0:6.0f}s] {set_name} k={k}: tau {r['mean_acceptance_length']:.2f} speedup "
                f"{r['speedup']:.2f}x",
                flush=True,
            )
    fmt = lambda v: "  n/a" if v is None else f"{v:5.2f}"  # noqa: E731
    print(
        f"\n{environment(target, drafter)['hardware']}, {args.dtype}, T={args.temperature}, {args.num_prompts} "
        f"prompts x {args.max_new_tokens} tokens"
    )
    print(
        f"{'prompts':<8}{'K':>3}{'tau':>7}{'accept':>8}{'speedup':>9}{'vs HF asst':>11}"
        f"{'predicted':>10}{'plain/HF':>9}{'match':>7}"
    )
    for set_name, k, r in rows:
        print(
            f"{set_name:<8}{k:>3}{r['mean_acceptance_length']:>7.2f}{r['draft_acceptance_rate']:>8.2f}{fmt(r['speedup']):>9}"
            f"{fmt(r['speedup_vs_hf_assisted']):>11}{fmt(r['predicted_speedup']):>10}{fmt(r['plain_vs_hf_plain']):>9}"
            f"{str(r['greedy_outputs_match']):>7}"
        )
    path = os.path.join(args.out, "results.json")
    write_json({"command": " ".join(sys.argv), "results": results}, path)
    plot_acceptance(results, os.path.join(args.out, "per_position_acceptance.png"))
    print(f"wrote {path} and per_position_acceptance.png")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
