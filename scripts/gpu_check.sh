#!/usr/bin/env bash
# The one prepared run for a session lent a GPU. The image has torch 2.11, transformers 5.17,
# accelerate, tensorboard and no network; datasets, gguf, deepspeed, wandb and chitchat are absent
# (none is imported on these paths) and a call carries at most 64 MiB. Wheels travel in .whl/
# (git-ignored: name it in the call's carry) and are put first on PYTHONPATH; none is needed for
# the image's transformers 5.17: the engine passes the KV cache by the keyword each version
# takes (`cache=` in 5.24, `past_key_values=` in 5.17/5.18) and moves a static layer's write
# pointer itself where StaticLayer has no crop() (infer/cache.py). Real weights are too large
# to carry, so every model is the built-in tiny-random or a randomly initialised Llama of a real shape: costs are
# real, acceptance is forced (bench_engine.py) or not measured (take τ from the CPU runs).
#   1. gpu-marked tests: compiled (CUDA-graph) static-cache decode, chains and trees == plain;
#   2. verification cost: one step vs chains vs trees, eager vs compiled, and what Medusa and
#      EAGLE-3 drafting costs (scripts/bench_verify_cost.py);
#   3. the engine end to end: tokens/s of plain vs speculative decoding, eager vs compiled,
#      with drafts forced to agree (scripts/bench_engine.py);
#   4. only with DRAFTER=medusa|eagle|eagle3: a tiny drafter trained on CUDA in bf16 (on the
#      stdlib corpus: chitchat is not there), then benchmarked as a chain and as a tree;
# then one summary table ($OUT/summary.txt). Mostly compilation; each step is capped at
# STEP_TIMEOUT seconds (default 180: steps 1-3 plus setup stay near a 10-minute call; the engine
# bench keeps the shapes it finished, the smaller first). Not yet timed on a GPU: for a first
# run, SHAPES=smollm2-135m is the cheap choice.
#   bash scripts/gpu_check.sh                          # OUT=runs/gpu SHAPES=smollm2-135m,llama-1b
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
SHAPES=${SHAPES:-smollm2-135m,llama-1b}
STEP_TIMEOUT=${STEP_TIMEOUT:-180}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=/tmp/draftsmith-cache HF_HUB_OFFLINE=1
if compgen -G ".whl/*.whl" >/dev/null; then
  rm -rf /tmp/site
  for whl in .whl/*.whl; do  # one at a time: a wheel for another Python must not stop the rest
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl" || echo "skipped $whl"
  done
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 - <<'EOF' 2>&1 | tee -a "$OUT/gpu.txt"
import importlib.util, torch, transformers, accelerate
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__)
print("absent:", " ".join(m for m in ("datasets", "gguf", "deepspeed", "wandb", "peft", "chitchat_dataset") if importlib.util.find_spec(m) is None) or "none")
EOF

step() { echo "=== $1 ($(date +%T))"; }
run() { timeout "$STEP_TIMEOUT" "$@" 2>&1 | grep -v "Loading weights\|Writing model"; }

step "gpu tests"
run python3 -m pytest -q -m gpu tests/test_gpu.py | tail -15 | tee "$OUT/pytest_gpu.log"

step "verification cost: step vs chain vs tree, eager vs compiled"
run python3 scripts/bench_verify_cost.py --shapes "$SHAPES" --context 512 --chains 4 --trees 16,64 \
  --repeats 30 --out "$OUT/verify_cost.json" | tee "$OUT/verify_cost.log"

step "engine: plain vs speculative (drafts forced to agree), eager vs compiled"
run python3 scripts/bench_engine.py --shapes "$SHAPES" -k 4 --prompt-len 512 --max-new-tokens 128 --repeats 3 \
  --out "$OUT/engine.json" | tee "$OUT/engine.log"

if [ -n "${DRAFTER:-}" ]; then   # medusa | eagle | eagle3: configs/tiny/$DRAFTER.yaml on CUDA in bf16
  step "$DRAFTER on CUDA, bf16"
  run python3 -m draftsmith.train configs/tiny/$DRAFTER.yaml --data.path=stdlib --optim.mixed_precision=bf16 \
    --logging.progress=false --output-dir /tmp/gpu-$DRAFTER | tail -8
  cp /tmp/gpu-$DRAFTER/train_summary.json "$OUT/${DRAFTER}_summary.json" 2>/dev/null
  for shape in "-k 3" "--tree-topk 2 --tree-depth 3 --tree-num-draft-tokens 8"; do
    step "bench $DRAFTER $shape (compiled decode)"
    run python3 -m draftsmith bench --draft /tmp/gpu-$DRAFTER/final $shape --num-prompts 4 --max-new-tokens 64 --quiet --no-hf | tail -8
  done
fi

step "summary"
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
log = out / "pytest_gpu.log"
tests = log.read_text().strip().splitlines()[-1] if log.is_file() and log.read_text().strip() else "no result"
print((out / "gpu.txt").read_text().strip() if (out / "gpu.txt").is_file() else "no gpu.txt")
print(f"gpu tests: {tests}")
cost = {(r["shape"], "compiled" if r["compiled"] else "eager"): r for r in (load("verify_cost.json") or {}).get("rows", [])}
engine = load("engine.json") or {"rows": []}
rows = {}
for r in engine["rows"]:
    rows.setdefault((r["shape"], r["mode"]), {})[r["method"]] = r
if not rows:
    print("engine: no result (see engine.log)")
fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
head = ["shape", "mode", "step ms", "verify5/step", "plain tok/s", "oracle chain4", "ceiling x", "self chain4", "oracle tree30", "tau", "same"]
print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
for (shape, mode), m in rows.items():
    c = cost.get((shape, mode), {})
    ratio = c["t_verify_chain4"] / c["t_step"] if c else None
    spec = [r for name, r in m.items() if name != "plain"]
    cell = lambda name: "n/a" if name not in m else f"{m[name]['tokens_per_s']:.0f} ({m[name]['speedup']:.2f}x)"  # noqa: E731
    k = next((r["k"] for r in spec), 4)
    cells = [shape, mode, fmt(c.get("t_step") and c["t_step"] * 1e3, ".2f"), fmt(ratio, ".2f"), fmt(m.get("plain", {}).get("tokens_per_s"), ".0f"),
             cell(f"oracle chain{k}"), fmt(ratio and (k + 1) / ratio, ".2f"), cell(f"self chain{k}"),
             cell(next((n for n in m if "tree" in n), "oracle tree")), "/".join(f"{r['mean_acceptance_length']:.2f}" for r in spec),
             "yes" if all(r["same_as_plain"] for r in m.values()) else "NO"]
    print("| " + " | ".join(cells) + " |")
print("ceiling: (k+1)·t_step/t_verify (Leviathan et al. 2023 with acceptance 1 and free drafting), "
      "t_verify from verify_cost.json (context " + str(next(iter(cost.values()), {}).get("context", "n/a")) + "); tok/s (speedup vs plain in the same mode)")
EOF
