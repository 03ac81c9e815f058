#!/usr/bin/env bash
# From a fresh machine to the default kernel package:
#   ./setup.sh          install what is missing, build the tools, build specs/default.json's
#                       package and list what it holds
#   ./setup.sh --deps   only install what is missing
set -euo pipefail
cd "$(dirname "$0")"

packages=(cmake ninja-build g++ nlohmann-json3-dev catch2 libclang-14-dev llvm-14-dev libzstd-dev ccache python3-dev python3-venv slurm-wlm munge
          clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "setup: no nvcc at $cuda/bin/nvcc: install the CUDA 13 toolkit (or set CUDA_HOME) and run again" >&2
  exit 1
fi
# The wheel is built offline with the system's setuptools and wheel.
python3 -c "import setuptools, wheel" 2>/dev/null || python3 -m pip install --quiet setuptools wheel
[ "${1:-}" = "--deps" ] && exit 0

cmake --preset default > /dev/null
cmake --build --preset default
build/generator/aotinfer-gen build specs/default.json
build/runtime/aotinfer list generated/aotinfer-default/package
