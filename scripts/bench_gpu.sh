#!/usr/bin/env bash
# The one prepared run for a session that is lent a GPU (never run yet: no device so far).
# 1. gpu-marked tests: the compiled (CUDA-graph) static-cache decode gives the same tokens as
#    eager and as plain decoding;
# 2. the Qwen pair and the truncated SmolLM2 draft on CUDA, bf16, compiled decode/verify.
# Keep the whole run within the device budget: NUM_PROMPTS/MAX_NEW_TOKENS scale it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --models
bash scripts/install_qwen.sh
OUT=${OUT:-runs/gpu}
N=${NUM_PROMPTS:-8}
T=${MAX_NEW_TOKENS:-128}
python -m pytest -q -m gpu tests/test_gpu.py
python scripts/bench_matrix.py --target qwen2.5-coder-1.5b-instruct --draft qwen2.5-coder-0.5b-instruct \
  --dtype bfloat16 --ks 2,4,6 --prompt-sets chat,code --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/qwen_pair"
python scripts/bench_matrix.py --target smollm2-135m-instruct --draft truncated:8 \
  --dtype bfloat16 --ks 4 --prompt-sets chat --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/smollm2_truncated"
