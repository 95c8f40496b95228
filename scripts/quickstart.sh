#!/usr/bin/env bash
# The main job on a fresh machine, offline: install, then benchmark the built-in SmolLM2 target
# with a draft made of its own first 8 layers (untrained, so expect ~1-3% acceptance and a
# slowdown: this run shows the engine and its overhead, not a good drafter; training comes next).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --models
OUT=${OUT:-runs/quickstart}
mkdir -p "$OUT"
draftsmith bench --target smollm2-135m-instruct --draft truncated:8 --prompts chat --num-prompts 3 \
  --max-new-tokens 48 --num-speculative-tokens 4 --json "$OUT/bench.json" --plot "$OUT/acceptance.png" "$@"
