#!/usr/bin/env bash
# Runs every benchmark and its peer in one go on a GPU machine; expects build-gpu/ from
# tests/gpu/run.sh and a package ($AOTINFER_BENCH_PACKAGE or the default package).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${AOTINFER_BENCH_PACKAGE:-$root/generated/aotinfer-default/package}
echo "== merge_state benchmark ($pkg)"
"$root/build-gpu/bench/aotinfer_bench" "$pkg"
echo
if python3 -c "import torch" 2>/dev/null; then
  PYTHONUNBUFFERED=1 python3 "$root/bench/merge_state_torch.py"
else
  echo "(PyTorch not installed: peer skipped)"
fi
