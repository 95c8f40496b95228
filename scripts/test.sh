#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, then runs the default tier
# (unit + tiny-model integration on CPU). `slow` (real offline models), `gpu`, `engines` (vLLM,
# llama.cpp: bash scripts/install_engines.sh) and `references` (the reference trainers:
# bash scripts/install_references.sh) tests are opt-in: bash scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
if [[ $# -eq 0 ]]; then
  # The default tier starts with the formatter and linter (settings in pyproject.toml).
  $PY -m ruff format --check --quiet . && $PY -m ruff check --quiet .
  set -- -m "not slow and not gpu and not engines and not references"
fi
exec $PY -m pytest -q "$@"
