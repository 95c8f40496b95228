#!/usr/bin/env bash
# Installs the reference trainers that the `references` test tier (tests/test_references.py)
# compares draftsmith's training step with, each in its own git-ignored venv .references/<name>,
# so that their pins never touch ours:
#
#   speculators   vllm-project/speculators 0.9.0 (EAGLE-3, DFlash), transformers 5.19
#   eagle         eagle-llm 1.2.1, the EAGLE authors' package (EAGLE-1), transformers 4.46
#   medusa        medusa-llm 0.1, the Medusa authors' package (Medusa-1/2), transformers 4.46
#   dflash        dflash 0.1.0, the DFlash authors' package, transformers 5.15
#   specforge     specforge 0.2.0, SGLang's trainer (EAGLE-3), without SGLang
#
#   bash scripts/install_references.sh                 all of them
#   bash scripts/install_references.sh speculators     some of them
#
# Every venv installs torch==2.13.0 (the local CPU wheel) first, and every later pip call states
# it again as a constraint: a reference's own pins (specforge: torch 2.11, eagle-llm: accelerate
# 0.21, gradio ...) would otherwise pull another torch, CUDA builds of gigabytes. So the reference
# goes in with --no-deps, then only the libraries its modelling and loss code imports.
# Idempotent: a finished venv has the stamp .references/<name>/INSTALLED and is skipped.
# The drivers the tests run in these venvs are tests/references/*.py; draftsmith never imports them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${DRAFTSMITH_REFERENCES:-$PWD/.references}
PY=${PYTHON:-python3}
TORCH=torch==2.13.0
mkdir -p "$ROOT"
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(speculators eagle medusa dflash specforge)

pipi() {  # pipi DIR ARGS...: pip install into DIR's venv, torch held at the local wheel
  local dir=$1
  shift
  "$dir/bin/python" -m pip install -q -c "$ROOT/torch-constraint.txt" "$@"
}

begin() {  # begin NAME: the venv with torch in it; returns 1 when already installed
  local dir=$ROOT/$1
  if [[ -f $dir/INSTALLED ]]; then
    echo "$1: installed ($dir)"
    return 1
  fi
  echo "$1: installing into $dir"
  [[ -x $dir/bin/python ]] || $PY -m venv "$dir"
  echo "$TORCH" >"$ROOT/torch-constraint.txt"
  pipi "$dir" "$TORCH"
}

finish() {  # finish NAME CHECK-PYTHON: remove what a dependency pulled for another torch, import-check, stamp
  local dir=$ROOT/$1
  "$dir/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  "$dir/bin/python" -c "$2"
  "$dir/bin/python" -m pip freeze >"$dir/INSTALLED"
  echo "$1: done"
}

install_speculators() {
  local d=$ROOT/speculators
  begin speculators || return 0
  pipi "$d" "transformers>=5.0,<=5.19.0" "datasets<=5.1.0" safetensors numpy
  # declared deps pull torchvision/torchaudio and hs-connectors' GPU stack: the package alone
  pipi "$d" --no-deps speculators==0.9.0 hs-connectors==0.9.0
  pipi "$d" click typer loguru openai pydantic pydantic-settings rich psutil protobuf httpx \
    huggingface-hub aiohttp pyyaml tqdm
  finish speculators "import speculators.models.eagle3, speculators.train.trainer; print('speculators ok')"
}

install_eagle() {
  local d=$ROOT/eagle
  begin eagle || return 0
  # eagle-llm 1.2.1 pins accelerate 0.21, gradio 3.50, fschat, openai 0.28 for its demo and data
  # scripts; its modelling (eagle/model/cnets.py) needs transformers 4.x (ALL_LAYERNORM_LAYERS)
  pipi "$d" "transformers==4.46.3" "accelerate<1.2" safetensors numpy sentencepiece
  pipi "$d" --no-deps eagle-llm==1.2.1
  finish eagle "import eagle.model.cnets; print('eagle ok')"
}

install_medusa() {
  local d=$ROOT/medusa
  begin medusa || return 0
  # medusa-llm 0.1: its modelling (medusa/model/) needs transformers 4.x; fschat only for its data
  pipi "$d" "transformers==4.46.3" "accelerate<1.2" safetensors numpy sentencepiece protobuf
  pipi "$d" --no-deps medusa-llm==0.1
  finish medusa "import medusa.model.medusa_model; print('medusa ok')"
}

install_dflash() {
  local d=$ROOT/dflash
  begin dflash || return 0
  pipi "$d" "transformers==5.15.0" safetensors numpy
  pipi "$d" --no-deps dflash==0.1.0
  finish dflash "import dflash.model; print('dflash ok')"
}

install_specforge() {
  local d=$ROOT/specforge
  begin specforge || return 0
  # specforge 0.2 pins torch 2.11 and sglang 0.5.14 (a CUDA serving stack): without them, only
  # its modelling and loss modules; the tier's driver reports what does not import.
  pipi "$d" "transformers==5.8.1" accelerate safetensors numpy pydantic pyyaml psutil tqdm datasets \
    huggingface-hub requests typing-extensions
  pipi "$d" --no-deps specforge==0.2.0
  finish specforge "import specforge; print('specforge ok')"
}

for name in "${names[@]}"; do
  case $name in
    speculators | eagle | medusa | dflash | specforge) "install_$name" ;;
    *)
      echo "unknown reference: $name (speculators | eagle | medusa | dflash | specforge)" >&2
      exit 2
      ;;
  esac
done
