#!/usr/bin/env bash
# The training issue's measurements (run on an otherwise idle machine; needs setup.sh --models):
#  1. training tokens/s of the default draft_lm recipe vs the target's forward-only tokens/s;
#  2. a draft trained for a bounded time (STEPS steps of 4x512 tokens; 150 took ~45 min here);
#  3. that draft against the untrained truncated one (same 4 layers) on the built-in chat
#     prompts (not in the training data): τ, speedup, vs transformers' assisted generation.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/bench_training}
STEPS=${STEPS:-150}
N=${NUM_PROMPTS:-4}
T=${MAX_NEW_TOKENS:-48}
RECIPE=configs/smollm2-135m-instruct/draft_lm.yaml
mkdir -p "$OUT"
python scripts/bench_train.py "$RECIPE" --steps 6 --warmup 1 --json "$OUT/train_throughput.json"
python -m draftsmith.train "$RECIPE" --output-dir "$OUT/draft" --resume --optim.max_steps="$STEPS" --optim.warmup_steps=10 \
  --optim.lr=1e-3 --checkpoint.save_every=25 --logging.eval_every=50 --logging.eval_batches=4 --logging.acceptance_prompts=8 \
  --logging.progress=false --logging.log_every=5 --logging.trackers=[tensorboard]
python scripts/bench_matrix.py --draft "$OUT/draft/final" --ks 2,4 --prompt-sets chat --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/trained"
python scripts/bench_matrix.py --draft truncated:4 --ks 2,4 --prompt-sets chat --num-prompts "$N" --max-new-tokens "$T" --out "$OUT/untrained"
