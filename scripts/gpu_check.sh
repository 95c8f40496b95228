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
#   4. every drafter kind in KINDS (default: draft_lm eagle3 dflash): a tiny drafter trained on
#      CUDA in bf16 (stdlib corpus: chitchat is not there), then the engine with it, eager and
#      compiled (--compile off|on: the target's decode/verify and every drafter's drafting
#      forwards as CUDA graphs), outputs == plain; then the target eager and the drafter eager
#      vs compiled side by side (scripts/bench_compiled_drafting.py);
#   5. FSDP on one GPU (configs/accelerate/fsdp.yaml, 1 process), 4 steps, then --resume to 8;
#   6. training throughput in bf16 against the target's forward-only rate (bench_train.py);
#   7. `draftsmith plan` against a real run on this GPU (scripts/plan_check.py: peak memory from
#      torch.cuda.max_memory_allocated, tokens/s fed the GPU's measured bf16 matmul rate), and the
#      8B recipe's plan for one such GPU (real 8B weights are not here: its run waits for a machine with them);
# then one summary table ($OUT/summary.txt). STEPS picks steps by name (default: all of
# "tests verify engine kinds fsdp train"); each is capped at STEP_TIMEOUT seconds (default 150).
# Not yet timed on a GPU: for a first run, SHAPES=smollm2-135m is the cheap choice.
#   bash scripts/gpu_check.sh                          # OUT=runs/gpu SHAPES=smollm2-135m,llama-1b
# On a CPU it runs what needs no CUDA (its test does): STEPS="kinds train" MODES=off DEVICE=cpu.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu}
SHAPES=${SHAPES:-smollm2-135m,llama-1b}
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
STEPS=${STEPS:-tests verify engine kinds fsdp train plan}
KINDS=${KINDS:-draft_lm eagle3 dflash}
MODES=${MODES:-off on}        # --compile off (eager) and on (CUDA graphs)
DEVICE=${DEVICE:-cuda}
TRAIN_STEPS=${TRAIN_STEPS:-30}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DRAFTSMITH_CACHE=/tmp/draftsmith-cache HF_HUB_OFFLINE=1
if compgen -G ".whl/*.whl" >/dev/null; then
  rm -rf /tmp/site
  for whl in .whl/*.whl; do  # one at a time: a wheel for another Python must not stop the rest
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl" || echo "skipped $whl"
  done
  export PYTHONPATH=/tmp/site
fi
[ -n "${SKIP_INSTALL:-}" ] || python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null | tee "$OUT/gpu.txt" || echo "no nvidia-smi" > "$OUT/gpu.txt"
python3 - <<'EOF' 2>&1 | tee -a "$OUT/gpu.txt"
import importlib.util, torch, transformers, accelerate
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__)
print("absent:", " ".join(m for m in ("datasets", "gguf", "deepspeed", "wandb", "peft", "chitchat_dataset") if importlib.util.find_spec(m) is None) or "none")
EOF

step() { echo "=== $1 ($(date +%T))"; }
run() { timeout "$STEP_TIMEOUT" "$@" 2>&1 | grep -v "Loading weights\|Writing model"; }

want() { [[ " $STEPS " == *" $1 "* ]]; }

if want tests; then
  step "gpu tests"
  run python3 -m pytest -q -m gpu tests/test_gpu.py | tail -15 | tee "$OUT/pytest_gpu.log"
fi

if want verify; then
  step "verification cost: step vs chain vs tree, eager vs compiled"
  run python3 scripts/bench_verify_cost.py --shapes "$SHAPES" --context 512 --chains 4 --trees 16,64 \
    --repeats 30 --out "$OUT/verify_cost.json" | tee "$OUT/verify_cost.log"
fi

if want engine; then
  step "engine: plain vs speculative (drafts forced to agree), eager vs compiled"
  run python3 scripts/bench_engine.py --shapes "$SHAPES" -k 4 --prompt-len 512 --max-new-tokens 128 --repeats 3 \
    --out "$OUT/engine.json" | tee "$OUT/engine.log"
fi

if want kinds; then
  for kind in $KINDS; do   # configs/tiny/$kind.yaml, trained briefly, then decoded eager and compiled
    step "$kind: train $TRAIN_STEPS steps ($DEVICE, bf16 on CUDA)"
    rm -rf "/tmp/gpu-kind-$kind"
    run python3 -m draftsmith.train configs/tiny/$kind.yaml --data.path=stdlib $([ "$DEVICE" = cuda ] && echo --optim.mixed_precision=bf16) \
      --optim.max_steps=$TRAIN_STEPS --checkpoint.save_every=$TRAIN_STEPS --logging.eval_every=0 --logging.progress=false \
      --output-dir "/tmp/gpu-kind-$kind" | tail -3
    for mode in $MODES; do
      step "$kind --compile $mode"
      run python3 -m draftsmith bench --draft "/tmp/gpu-kind-$kind/final" -k 3 --compile "$mode" --device "$DEVICE" \
        --num-prompts 4 --max-new-tokens 64 --quiet --no-hf --json "$OUT/kind_${kind}_$mode.json" | tail -4
    done
  done
  if [[ " $MODES " == *" on "* ]]; then
    step "drafting eager vs compiled, target eager"
    run python3 scripts/bench_compiled_drafting.py --target tiny-random --dtype float32 --device "$DEVICE" \
      $(for kind in $KINDS; do echo --draft "/tmp/gpu-kind-$kind/final"; done) --num-prompts 4 --max-new-tokens 64 \
      --json "$OUT/compiled_drafting.json" | tail -12
  fi
fi

if want fsdp; then   # accelerate refuses FSDP on a CPU
  step "FSDP, one GPU: 4 steps, then resume to 8"
  rm -rf /tmp/gpu-fsdp
  for n in 4 8; do
    run accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 -m draftsmith.train \
      configs/tiny/draft_lm.yaml --data.path=stdlib --optim.max_steps=$n --checkpoint.save_every=2 --logging.eval_every=0 \
      --logging.progress=false --output-dir /tmp/gpu-fsdp $([ $n = 8 ] && echo --resume) | tail -3
  done
  cp /tmp/gpu-fsdp/train_summary.json "$OUT/fsdp_summary.json" 2>/dev/null
fi

if want train; then
  for kind in draft_lm eagle3; do
    step "training throughput: $kind vs the target's forward only"
    run python3 scripts/bench_train.py configs/tiny/$kind.yaml --steps 5 --warmup 1 --data.path=stdlib \
      $([ "$DEVICE" = cuda ] && echo --optim.mixed_precision=bf16) --json "$OUT/train_$kind.json" | tail -4
  done
fi

if want plan; then
  for kind in draft_lm eagle3; do
    step "plan vs a real run: $kind"
    run python3 scripts/plan_check.py configs/tiny/$kind.yaml --steps 12 --data.path=stdlib \
      $([ "$DEVICE" = cuda ] && echo --optim.mixed_precision=bf16) --json "$OUT/plan_check_$kind.json" | tail -2
  done
  step "plan: Llama-3.1-8B EAGLE-3 on one of these GPUs"
  mem=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 80e9)")
  run python3 -m draftsmith plan configs/llama-3.1-8b-instruct/eagle3.yaml --gpus 1 --gpu-memory "$mem" \
    --gpu-tflops measured --json "$OUT/plan_8b.json" | tail -12
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
kinds = sorted({p.stem.removeprefix("kind_").rsplit("_", 1)[0] for p in out.glob("kind_*.json")})  # kind_<kind>_<mode>.json
if kinds:
    print("\n| drafter (tiny, trained here) | mode | tok/s | speedup vs plain | tau | outputs == plain |\n|---|---|---|---|---|---|")
    for kind in kinds:
        for mode in ("off", "on"):
            r = load(f"kind_{kind}_{mode}.json")
            if r:
                print(f"| {kind} | {'compiled' if r.get('compiled') else 'eager'} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
                      f"{r['mean_acceptance_length']:.2f} | {r['greedy_outputs_match']} |")
cd_ = load("compiled_drafting.json")
if cd_:
    print("\n| drafter, target eager | draft ms/step | compiled/eager | tok/s | speedup | same acceptance | outputs == plain |\n|---|---|---|---|---|---|---|")
    for name, r in cd_["methods"].items():
        print(f"| {name} | {r['draft_s'] * 1e3:.2f} | {fmt(r.get('draft_over_eager'), '.2f')} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | "
              f"{r.get('same_acceptance_as_eager', '')} | {r['outputs_match_plain']} |")
f = load("fsdp_summary.json")
print(f"\nFSDP one GPU, 4 steps then resume to 8: " + (f"{f.get('steps')} steps, {f.get('distributed_type')}, eval loss {(f.get('eval') or {}).get('loss')}" if f else "no result"))
for kind in ("draft_lm", "eagle3"):
    t = load(f"train_{kind}.json")
    if t:
        print(f"training {kind} ({t['mixed_precision']}): {t['train_tokens_per_s']:.0f} tok/s vs target forward only "
              f"{t['target_forward_tokens_per_s']:.0f} tok/s = {t['train_over_forward']:.2f}x (FLOP bound {t['flop_bound']:.2f}x)")
for kind in ("draft_lm", "eagle3"):
    c = load(f"plan_check_{kind}.json")
    if c:
        print(f"plan vs run, tiny {kind}: memory {c['memory']['ratio']:.2f}x, tokens/s {c['tokens_per_s']['ratio']:.2f}x "
              f"(at {c['matmul_tflops']['used']:.1f} TFLOP/s measured)")
print("ceiling: (k+1)·t_step/t_verify (Leviathan et al. 2023 with acceptance 1 and free drafting), "
      "t_verify from verify_cost.json (context " + str(next(iter(cost.values()), {}).get("context", "n/a")) + "); tok/s (speedup vs plain in the same mode)")
EOF
