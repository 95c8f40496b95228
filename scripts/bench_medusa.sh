#!/usr/bin/env bash
# Medusa on the built-in SmolLM2-135M-Instruct, CPU: train Medusa-1 heads for a bounded number of
# steps on chitchat, then put the heads (chain and trees) beside the 45-minute independent draft
# (scripts/bench_training.sh writes it) on the same prompts in one interleaved run.
# Run on an otherwise idle machine. STEPS (default 36, ~25 min here) bounds training.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-36}
RUN=${RUN:-runs/smollm2-medusa-30min}
DRAFT_LM=${DRAFT_LM:-runs/smollm2-draft-lm-45min/final}
if [[ ! -d "$RUN/final" ]]; then
  python -m draftsmith.train configs/smollm2-135m-instruct/medusa.yaml --output-dir "$RUN" --resume \
    --optim.grad_accum=1 --optim.max_steps="$STEPS" --optim.warmup_steps=4 --logging.eval_every=18 \
    --logging.eval_batches=4 --logging.log_every=3 --logging.acceptance_prompts=8 --checkpoint.save_every=6 \
    --logging.progress=false 2>&1 | grep -v "Loading weights\|Writing model" | tee "$RUN.log"
fi
METHODS=(--method "medusa_k2=$RUN/final,k=2" --method "medusa_k3=$RUN/final,k=3"
         --method "medusa_tree8=$RUN/final,topk=4,depth=3,tokens=9"
         --method "medusa_tree16=$RUN/final,topk=4,depth=4,tokens=17"
         --method "medusa_tree32=$RUN/final,topk=6,depth=4,tokens=33")
if [[ -d "$DRAFT_LM" ]]; then METHODS+=(--method "draft_lm_k2=$DRAFT_LM,k=2" --method "draft_lm_k4=$DRAFT_LM,k=4"); fi
python scripts/bench_drafters.py --target smollm2-135m-instruct "${METHODS[@]}" \
  --prompts chat --num-prompts 4 --max-new-tokens 48 --out runs/bench/medusa 2>&1 | grep -v "Loading weights"
