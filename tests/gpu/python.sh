#!/usr/bin/env bash
# The Python layer on a GPU machine with PyTorch: installs the wheel carried in dist/ (built
# elsewhere with the default package) and runs every Python GPU check, then the host-overhead
# benchmark. Usage: tests/gpu/python.sh [--no-bench] [SCRIPT.py...] (default: every gpu_*.py
# check). Logs go to $OUT (or build-gpu/out).
set -uo pipefail
bench=1 scripts=()
for arg in "$@"; do
  case $arg in
    --no-bench) bench=0 ;;
    *) scripts+=("$arg") ;;
  esac
done
[ ${#scripts[@]} -gt 0 ] || scripts=(gpu_torch.py gpu_checks.py gpu_flashinfer.py gpu_torch_ops.py gpu_transformers.py gpu_cascade.py)
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
wheel=$(ls "$root"/dist/aotinfer-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "no wheel in dist/: build one with packaging/stage_wheel.sh and carry dist/"; exit 1; }
python3 -c "import torch" 2>/dev/null || { echo "PyTorch is not installed: nothing to check"; exit 1; }
site=/tmp/aotinfer-site
rm -rf "$site"
python3 -m pip install --quiet --no-index --no-deps --target "$site" "$wheel" || exit 1
status=0
tests=$root/packaging/python/tests
for script in "${scripts[@]}"; do
  [ -f "$tests/$script" ] || continue
  echo "== $script ($wheel)"
  # From /tmp so that the installed wheel is imported, not the source tree.
  (cd /tmp && PYTHONPATH=$site PYTHONUNBUFFERED=1 timeout 300 python3 "$tests/$script") 2>&1 | tee "$out/${script%.py}.log" || status=1
done
if [ $bench = 1 ]; then
  echo "== Python host overhead"
  # FlashInfer as the same-run peer when its bundle was carried in .peers/ (a copy of ../shared/peers).
  peer_env=$root/.peers/flashinfer_env.sh
  (cd /tmp && { [ -f "$peer_env" ] && source "$peer_env" "$root/.peers/flashinfer-peer-0.7.2.post1-sm90a.tar.gz"; true; } && PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} \
    PYTHONUNBUFFERED=1 python3 "$root/bench/python_overhead.py") 2>&1 | tee "$out/python_overhead.log" || status=1
fi
echo "== Python GPU checks finished with status $status"
exit $status
