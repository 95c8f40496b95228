#!/usr/bin/env bash
# The main job on a fresh machine, offline: install, train an EAGLE-3 draft (the drafter that
# accepted the most per minute of training on this CPU, docs/results.md; its recipe tuned for
# minutes of CPU time) for the built-in SmolLM2 target on ShareGPT (its first 2,000 conversations, 2.3M tokens: more than a CPU budget
# trains on, and read in seconds where all of it takes minutes) for a bounded time, then benchmark it as an
# EAGLE-2 dynamic tree against plain decoding, drafting every step and with adaptive K, and print both.
#   bash scripts/quickstart.sh [--minutes N] [extra draftsmith bench flags]
# MINUTES (default 10) bounds the training; rerunning resumes (or reuses) the same run.
# RECIPE and OUT pick another recipe / output folder; SKIP_SETUP=1 skips the install (tests).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-10}
if [[ "${1:-}" == "--minutes" ]]; then MINUTES=$2; shift 2; fi
RECIPE=${RECIPE:-configs/smollm2-135m-instruct/eagle3_quick.yaml}
OUT=${OUT:-runs/quickstart}
[[ -n "${SKIP_SETUP:-}" ]] || bash scripts/setup.sh --models
export HF_HUB_OFFLINE=1  # everything here is local: fail fast instead of trying the network
# Steps set the cosine schedule's length: the steps the budget reaches on this device (~22 of the
# quick recipe's a minute on a CPU, the plan's rate on a GPU: scripts/quickstart_steps.py); the
# time budget stops the run either way.
STEPS=$(python3 scripts/quickstart_steps.py "$RECIPE" "$MINUTES")
draftsmith train "$RECIPE" --output-dir "$OUT/eagle3" --resume --optim.max_minutes="$MINUTES" \
  --optim.max_steps="$STEPS"
draftsmith bench --draft "$OUT/eagle3/final" --tree-topk 4 --tree-depth 4 --tree-num-draft-tokens 17 \
  --prompts chat --num-prompts 3 --max-new-tokens 48 --json "$OUT/bench.json" --plot "$OUT/acceptance.png" "$@"
python3 - "$OUT" "$MINUTES" <<'PY'
import json, sys
out, minutes = sys.argv[1], sys.argv[2]
r = json.load(open(f"{out}/bench.json"))
tau, speedup = r["mean_acceptance_length"], r["speedup"]
fixed = r.get("fixed_k") or r  # the tree drafted every step, beside the adaptive runtime
print(f"\nEAGLE-3 after {minutes} min of training: mean_acceptance_length {fixed['mean_acceptance_length']:.2f}; "
      f"over plain decoding: {fixed['speedup']:.2f}x drafting its tree every step"
      + (f", {speedup:.2f}x with the adaptive runtime (the default: it drafts only where drafting pays, "
         f"plain steps elsewhere)" if "fixed_k" in r else ""))
if fixed["speedup"] < 1:
    loop = fixed.get("step_costs_in_loop_s") or {}
    cost = (f"one verify forward costs {loop['t_verify'] / loop['t_step']:.1f}x a decode step and drafting "
            f"{loop['t_draft'] / loop['t_step']:.1f}x more ({r['dtype']})") if loop else "a verify forward costs more than a decode step"
    print(f"Drafting every step does not beat plain decoding after this short run: on this machine {cost}, "
          "so a draft must accept far more than a few minutes of training give (docs/results.md). "
          "Train longer (--minutes 60, or a GPU), then rerun.")
if "fixed_k" in r and speedup < 1:  # the default runtime below plain decoding: say where the time went
    counts = r["adaptive_k"]["k_counts"]
    total, drafted = sum(counts.values()), sum(n for k, n in counts.items() if k != "0")
    print(f"The adaptive runtime ran at {speedup:.2f}x of plain decoding: {drafted} of its {total} steps drafted "
          "(each run's first step, and probes and tries that test whether drafting pays), each dearer than a "
          "plain step while this draft accepts little; the other steps were plain ones. Over "
          f"{r['num_prompts']} short prompts those tries weigh more than over a long run, and a gap of a few "
          "percent is within one short run's timing noise.")
if r.get("first_divergence"):
    from draftsmith.evaluation.divergence import divergence_line
    print(divergence_line(r["first_divergence"]))
print(f"checkpoint {out}/eagle3/final   results {out}/bench.json   plot {out}/acceptance.png")
PY
