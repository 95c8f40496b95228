#!/usr/bin/env bash
# EAGLE on the built-in SmolLM2-135M-Instruct, CPU: train EAGLE-1 and EAGLE-3 for the same wall
# time on the same chitchat data (MINUTES each, default 24, as the Medusa heads of
# scripts/bench_medusa.sh), then put EAGLE-1 (chain), EAGLE-2 (EAGLE-1 weights, dynamic tree) and
# EAGLE-3 (dynamic tree) beside Medusa and the independent draft on held-out chat and code
# prompts in one interleaved run. Run on an otherwise idle machine; checkpoints are reused.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-24}
EAGLE=${EAGLE:-runs/smollm2-eagle-24min}
EAGLE3=${EAGLE3:-runs/smollm2-eagle3-24min}
MEDUSA=${MEDUSA:-runs/smollm2-medusa-30min/final}
DRAFT_LM=${DRAFT_LM:-runs/smollm2-draft-lm-45min/final}
train() {  # recipe, output dir, max steps (the cosine schedule's length; the time budget stops it)
  if [[ ! -d "$2/final" ]]; then
    python -m draftsmith.train "$1" --output-dir "$2" --resume --optim.max_steps="$3" --optim.max_minutes="$MINUTES" \
      --logging.eval_every=1000 --logging.progress=false 2>&1 | grep -v "Loading weights\|Writing model" | tee "$2.log"
  fi
}
train configs/smollm2-135m-instruct/eagle.yaml "$EAGLE" 150    # ~230 tokens/s here: ~140 steps in 24 min
train configs/smollm2-135m-instruct/eagle3.yaml "$EAGLE3" 100  # 7 unrolled steps: ~half the throughput
TREE="topk=4,depth=4,tokens=17"  # 16 drafted nodes per step for every tree
METHODS=(--method "eagle1_k3=$EAGLE/final,k=3" --method "eagle2_tree16=$EAGLE/final,$TREE"
         --method "eagle3_k3=$EAGLE3/final,k=3" --method "eagle3_tree16=$EAGLE3/final,$TREE")
if [[ -d "$MEDUSA" ]]; then METHODS+=(--method "medusa_tree16=$MEDUSA,$TREE"); fi
if [[ -d "$DRAFT_LM" ]]; then METHODS+=(--method "draft_lm_k2=$DRAFT_LM,k=2"); fi
python scripts/bench_drafters.py --target smollm2-135m-instruct "${METHODS[@]}" \
  --prompts chat,code --num-prompts 5 --max-new-tokens 48 --out runs/bench/eagle 2>&1 | grep -v "Loading weights"
