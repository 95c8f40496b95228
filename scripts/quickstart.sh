#!/usr/bin/env bash
# The main job on a fresh machine, offline: install, distil a draft for the built-in SmolLM2 target
# with the default recipe (a short run: STEPS optimizer steps of 4x512 tokens, ~17 s each on 2 CPU
# cores), then benchmark the trained checkpoint against plain decoding and transformers' assisted
# generation. Rerunning resumes (or reuses) the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --models
OUT=${OUT:-runs/quickstart}
STEPS=${STEPS:-20}
draftsmith train configs/smollm2-135m-instruct/draft_lm.yaml --output-dir "$OUT/draft" --resume \
  --optim.max_steps="$STEPS" --optim.warmup_steps=5 --optim.lr=1e-3 --checkpoint.save_every=10 \
  --logging.eval_every=1000 --logging.eval_batches=2 --logging.acceptance_prompts=4
draftsmith bench --draft "$OUT/draft/final" --prompts chat --num-prompts 3 --max-new-tokens 48 \
  --num-speculative-tokens 4 --json "$OUT/bench.json" --plot "$OUT/acceptance.png" "$@"
