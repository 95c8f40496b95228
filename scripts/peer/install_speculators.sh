#!/usr/bin/env bash
# Installs vllm-project/speculators 0.9.0 (the peer EAGLE-3 trainer) into its own git-ignored venv
# .engines/speculators, on CPU, without ever pulling a CUDA torch:
#   1. torch==2.13.0 first (the local CPU wheel); every later pip call re-states it as a pin
#   2. transformers/datasets within speculators' caps, safetensors
#   3. speculators + hs-connectors with --no-deps (their declared deps pull a CUDA torch / vLLM)
#   4. their light runtime deps by hand; torchvision/torchaudio are removed if anything pulled them
# Idempotent: a finished venv has the stamp .engines/speculators/INSTALLED and is skipped.
#   bash scripts/peer/install_speculators.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${SPECULATORS_VENV:-$PWD/.engines/speculators}
PY=${PYTHON:-python3}
TORCH=torch==2.13.0
if [[ -f $DIR/INSTALLED ]]; then echo "speculators: installed ($DIR)"; exit 0; fi
mkdir -p "$(dirname "$DIR")"
[[ -x $DIR/bin/python ]] || $PY -m venv "$DIR"
P="$DIR/bin/python -m pip install -q"
$P "$TORCH"
$P "$TORCH" "transformers>=5.0,<=5.19.0" "datasets<=5.1.0" safetensors numpy
$P --no-deps speculators==0.9.0 hs-connectors==0.9.0
$P "$TORCH" click typer loguru openai pydantic pydantic-settings rich psutil protobuf httpx \
  huggingface-hub aiohttp pyyaml tqdm
"$DIR/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
"$DIR/bin/python" - <<'PY'
import torch, transformers, speculators
from speculators.cli import app  # noqa: F401  (the CLI imports its whole train stack lazily or not)
print("speculators", speculators.__version__ if hasattr(speculators, "__version__") else "?",
      "torch", torch.__version__, "transformers", transformers.__version__)
PY
echo "speculators==0.9.0 $TORCH" > "$DIR/INSTALLED"
