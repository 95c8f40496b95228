#!/usr/bin/env bash
# The one prepared run for a session lent a GPU: about 9 minutes of a 10-minute command, on a
# bare machine (torch, transformers, accelerate; no package registry, no network, no weights).
# Wheels travel in .whl/ (git-ignored: name it in the call's carry) and are put first on
# PYTHONPATH. Real weights are too large to carry: every model is tiny-random or a randomly
# initialised Llama-3.1-8B shape built on the GPU in bf16, so costs are real and acceptance is
# forced (oracle drafts) or not measured (take τ from the CPU runs).
#
# Steps, most valuable first, each under its own timeout (what it wrote before a timeout is
# kept); expected time on one H200 / cap:
#   (a) tests   ~150 s / 200 s tests/test_gpu.py in fp32: compiled chain, compiled Medusa tree,
#                               EAGLE-3 dynamic tree, each == plain greedy, and every registered
#                               kind's compiled drafting == eager with forced acceptance
#   (b) verify  ~120 s / 120 s the 8B shape: t_step, t_verify for K+1 = 4/6/8 and trees of
#                               16/64, eager and compiled (compiles dominate), plus Medusa's and
#                               the EAGLE-3 head's drafting cost (4096 wide, 32k vocabulary)
#   (c) engine  ~120 s / 120 s the engine on the 8B shape, oracle chain (K+1 = 6) and tree vs
#                               plain, eager and compiled, with the graph counters of the timed
#                               runs; the summary sets them against (K+1)·t_step/t_verify from (b)
#   (d) train   ~60 s / 90 s   EAGLE-3 training steps over the random 8B target at 2048 tokens:
#                               peak memory and tokens/s against `draftsmith plan` for that run
#   (e) matmul  ~10 s / 20 s   the bf16 matmul-rate probe `draftsmith plan --gpu-tflops measured` uses
# plus ~20 s of set-up. The whole run also stops at BUDGET seconds (default 540): a step starts
# with what is left, and none starts with under 15 s.
#
# Results: every step writes its JSON row by row into RUN (a folder outside OUT); after every
# step RUN is packed into $OUT/results.tgz and the summary rewritten as $OUT/summary.txt: those
# two files are all that is ever under OUT, whenever the command is stopped.
#   bash scripts/gpu_check.sh                         # OUT=runs/gpu
#   STEPS="verify engine" bash scripts/gpu_check.sh   # a subset, by name
# Its CPU dry run (tests/test_gpu_check.py): DEVICE=cpu SHAPE=tiny RECIPE=configs/tiny/eagle3.yaml.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
RUN=${RUN:-/tmp/gpu-check-run}
STEPS=${STEPS:-tests verify engine train matmul}
DEVICE=${DEVICE:-cuda}
SHAPE=${SHAPE:-llama-3.1-8b}                               # scripts/bench_verify_cost.py SHAPES
RECIPE=${RECIPE:-configs/llama-3.1-8b-instruct/eagle3.yaml}
TRAIN_STEPS=${TRAIN_STEPS:-6}
BUDGET=${BUDGET:-540}                                      # seconds for all steps; 0: no limit
CAP_SCALE=${CAP_SCALE:-1}                                  # 0: no per-step caps (a slow CPU is not hung)
K=${K:-5}
MATMUL_N=${MATMUL_N:-}                                     # default: measure_tflops's (8192 on a GPU)
rm -rf "$RUN" && mkdir -p "$RUN" "$OUT"
START=$(date +%s)
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=/tmp/draftsmith-cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if compgen -G ".whl/*.whl" >/dev/null; then
  rm -rf /tmp/site
  for whl in .whl/*.whl; do  # one at a time: a wheel for another Python must not stop the rest
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl" || echo "skipped $whl"
  done
  export PYTHONPATH=/tmp/site
fi
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
} > "$RUN/gpu.txt" 2>&1

pack() {  # the summary, then the run folder, each replaced whole (a stop mid-write leaves the last one)
  python3 scripts/gpu_check_summary.py "$RUN" "$SHAPE" > "$RUN/summary.txt" 2>&1
  cp "$RUN/summary.txt" "$OUT/summary.txt.part" && mv "$OUT/summary.txt.part" "$OUT/summary.txt"
  tar czf /tmp/gpu-check-results.tgz -C "$RUN" . && mv /tmp/gpu-check-results.tgz "$OUT/results.tgz"
}

# step NAME CAP COMMAND...: run under min(CAP, what is left of BUDGET), log into RUN, then pack.
step() {
  local name=$1 cap=$(( $2 * CAP_SCALE )); shift 2
  [[ " $STEPS " == *" $name "* ]] || return 0
  local left=0
  if [ "$BUDGET" -gt 0 ]; then
    left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -lt 15 ]; then echo "$name: not run, $left s of the budget left" >> "$RUN/steps.txt"; pack; return 0; fi
    if [ "$cap" -eq 0 ] || [ "$left" -lt "$cap" ]; then cap=$left; fi
  fi
  echo "=== $name ($(date +%T), cap ${cap}s)"
  local t0=$(date +%s)
  timeout -k 10 "$cap" "$@" > "$RUN/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $(( $(date +%s) - t0 )) s$([ $rc = 124 ] && echo ' (timed out)')" | tee -a "$RUN/steps.txt"
  tail -3 "$RUN/$name.log"
  pack
}

bf16=$([ "$DEVICE" = cuda ] && echo bfloat16 || echo float32)
step tests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py
step verify 120 python3 scripts/bench_verify_cost.py --shapes "$SHAPE" --dtype "$bf16" --context 512 \
  --chains 3,5,7 --trees 16,64 --repeats 20 --out "$RUN/verify_cost.json"
step engine 120 python3 scripts/bench_engine.py --shapes "$SHAPE" --device "$DEVICE" --dtype "$bf16" -k "$K" \
  --methods oracle,tree --prompt-len 512 --max-new-tokens 96 --repeats 2 --out "$RUN/engine.json"
step train 90 python3 scripts/plan_check.py "$RECIPE" --random-target --steps "$TRAIN_STEPS" --rows 64 \
  --data.path=stdlib --data.source=corpus --optim.batch_size=1 $([ "$DEVICE" = cuda ] && echo --optim.mixed_precision=bf16) \
  --json "$RUN/plan_check.json"
step matmul 20 python3 -c "import json, sys, torch; from draftsmith.train.trainer.flops import measure_tflops as m
n = int(sys.argv[2]) if sys.argv[2] else None
r = {'dtype': sys.argv[1], 'n': n, 'tflops': m(sys.argv[1], n=n, seconds=3.0, device='$DEVICE')}
print(r); json.dump(r, open('$RUN/matmul.json', 'w'))" "$bf16" "$MATMUL_N"
pack
cat "$OUT/summary.txt"
