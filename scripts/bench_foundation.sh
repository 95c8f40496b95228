#!/usr/bin/env bash
# The Foundation issue's measurements, in one go (run on an otherwise idle machine):
#  1. Qwen2.5-Coder 0.5B draft -> 1.5B target, T=0, K in {2,4,6}, chat and code prompts (bf16:
#     fp32 is ~2x slower per step on a CPU without AVX-512 and ~1.5 h for this sweep).
#  2. SmolLM2 with an untrained truncated draft (first 8 of 30 layers): acceptance ~0, so
#     speedup vs predicted_speedup shows the engine's own overhead.
# Needs: bash scripts/setup.sh --models && bash scripts/install_qwen.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/bench}
N=${NUM_PROMPTS:-3}
T=${MAX_NEW_TOKENS:-48}
python scripts/bench_matrix.py --target qwen2.5-coder-1.5b-instruct --draft qwen2.5-coder-0.5b-instruct \
  --dtype bfloat16 --ks 2,4,6 --prompt-sets chat,code --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/qwen_pair"
python scripts/bench_matrix.py --target smollm2-135m-instruct --draft truncated:8 \
  --dtype float32 --ks 2,4 --prompt-sets chat,code --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/smollm2_truncated"
