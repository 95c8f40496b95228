#!/usr/bin/env bash
# The one prepared run for a session lent a GPU (an image with torch, transformers, accelerate,
# peft and tensorboard, and no network: nothing is downloaded; wheels it lacks travel in .whl/).
# Uses the built-in tiny-random target only (real weights are too large to carry there).
#   1. gpu-marked tests: compiled (CUDA-graph) static-cache decode == eager == plain decoding;
#   2. the trainer on CUDA, bf16 mixed precision, single process (configs/accelerate/single.yaml);
#   3. the same recipe under accelerate FSDP2 (configs/accelerate/fsdp.yaml, one process);
#   4. training tokens/s vs the target's forward-only tokens/s (scripts/bench_train.py);
#   5. the trained checkpoint benchmarked with the compiled decode (draftsmith bench).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=/tmp/draftsmith-cache HF_HUB_OFFLINE=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" | tee -a "$OUT/gpu.txt"

step() { echo "=== $1"; }
step "gpu tests"
python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -5 | tee "$OUT/pytest_gpu.log"

TRAIN=(-m draftsmith.train configs/tiny/draft_lm.yaml --optim.mixed_precision=bf16 --logging.progress=false --logging.log_every=20)
step "single GPU, bf16"
accelerate launch --config_file configs/accelerate/single.yaml "${TRAIN[@]}" --output-dir /tmp/gpu-single 2>&1 | grep -v "Loading weights\|Writing model" | tail -12
cp /tmp/gpu-single/train_summary.json "$OUT/single_summary.json"

step "FSDP2 through accelerate, 1 process"
accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 "${TRAIN[@]}" --output-dir /tmp/gpu-fsdp --optim.max_steps=20 --checkpoint.save_every=10 2>&1 | grep -v "Loading weights\|Writing model" | tail -12
step "FSDP2 resume"
accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 "${TRAIN[@]}" --output-dir /tmp/gpu-fsdp --optim.max_steps=30 --checkpoint.save_every=10 --resume 2>&1 | grep -v "Loading weights\|Writing model" | tail -6
cp /tmp/gpu-fsdp/train_summary.json "$OUT/fsdp_summary.json"

step "training vs forward-only tokens/s"
python3 scripts/bench_train.py configs/tiny/draft_lm.yaml --steps 20 --json "$OUT/bench_train_tiny.json" --optim.mixed_precision=bf16 --data.max_length=512 --optim.batch_size=8 2>/dev/null

step "bench the trained checkpoint (compiled decode)"
python3 -m draftsmith bench --draft /tmp/gpu-single/final --num-prompts 4 --max-new-tokens 64 --quiet --json "$OUT/bench_tiny.json" 2>&1 | grep -v "Loading weights" | tail -12
