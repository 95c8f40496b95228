#!/usr/bin/env bash
# The one prepared run for a session lent a GPU (an image with torch, transformers, accelerate,
# peft and tensorboard, and no network: nothing is downloaded; wheels it lacks or has in another
# version travel in .whl/: transformers as pinned here, datasets, chitchat).
# Real weights are too large to carry, so models are the built-in tiny-random or randomly
# initialised real shapes (costs are real; acceptance comes from the CPU runs).
#   1. gpu-marked tests: compiled (CUDA-graph) static-cache decode, chains and trees == plain;
#   2. verification cost: one step vs chains vs trees, eager vs compiled, and what Medusa and
#      EAGLE-3 (dynamic trees) drafting costs, SmolLM2-135M and Llama-1B shapes in bf16
#      (scripts/bench_verify_cost.py);
#   3. a tiny drafter (DRAFTER=eagle3 by default) trained on CUDA in bf16, then benchmarked with
#      the compiled decode as a chain and as a tree (draftsmith bench).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=/tmp/draftsmith-cache HF_HUB_OFFLINE=1
if compgen -G ".whl/*.whl" >/dev/null; then
  rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" | tee -a "$OUT/gpu.txt"

step() { echo "=== $1 ($(date +%T))"; }
step "gpu tests"
python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.log"

step "verification cost: step vs chain vs tree, eager vs compiled"
python3 scripts/bench_verify_cost.py --shapes smollm2-135m,llama-1b --context 512 --chains 4 --trees 16,64 \
  --repeats 30 --out "$OUT/verify_cost.json" 2>&1 | grep -v "Loading weights" | tee "$OUT/verify_cost.log"

DRAFTER=${DRAFTER:-eagle3}   # medusa | eagle | eagle3: trained on CUDA in bf16 from configs/tiny/$DRAFTER.yaml
step "$DRAFTER on CUDA, bf16"
python3 -m draftsmith.train configs/tiny/$DRAFTER.yaml --optim.mixed_precision=bf16 --logging.progress=false \
  --output-dir /tmp/gpu-$DRAFTER 2>&1 | grep -v "Loading weights\|Writing model" | tail -8
cp /tmp/gpu-$DRAFTER/train_summary.json "$OUT/${DRAFTER}_summary.json" 2>/dev/null
for shape in "-k 3" "--tree-topk 2 --tree-depth 3 --tree-num-draft-tokens 8"; do
  step "bench $DRAFTER $shape (compiled decode)"
  python3 -m draftsmith bench --draft /tmp/gpu-$DRAFTER/final $shape --num-prompts 4 --max-new-tokens 64 --quiet --no-hf 2>&1 | grep -v "Loading weights" | tail -8
done
