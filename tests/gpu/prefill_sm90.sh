#!/usr/bin/env bash
# The two prefill kernels on one Hopper GPU: the package of tests/gpu/prefill_sm90.json built for
# plain sm_90 (the driver loads the mma.sync SASS) and for sm_90a (the wgmma kernel behind the
# large tile), each through the prefill GPU tests and compute-sanitizer, then the prefill
# benchmark of both with the PyTorch peers (cuDNN, flash) in the same run.
# (A hung kernel would hold the machine: every run has a time limit.)
# Usage: tests/gpu/prefill_sm90.sh BUILD_DIR [--no-bench]
#   (BUILD_DIR holds tests/aotinfer_gpu_tests and bench/aotinfer_bench_prefill; the packages are
#   generated/aotinfer-prefill-sm90-sm_90{,a}, built with aotinfer-gen build --archs, or here.)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: $0 BUILD_DIR [--no-bench]}
bench=1
[ "${2:-}" = --no-bench ] && bench=0
out=${OUT:-$build/out}
mkdir -p "$out"
status=0
tests="batch_prefill*,BatchPrefill*"
for arch in sm_90a sm_90; do
  pkg=$root/generated/aotinfer-prefill-sm90-$arch/package
  if [ ! -f "$pkg/manifest.json" ]; then
    [ -x "$build/generator/aotinfer-gen" ] || { echo "prefill_sm90: no package at $pkg and no aotinfer-gen to build it"; exit 1; }
    "$build/generator/aotinfer-gen" build "$root/tests/gpu/prefill_sm90.json" --archs $arch
  fi
  echo "== prefill GPU tests: $arch"
  AOTINFER_TEST_PACKAGE=$pkg timeout 150 "$build/tests/aotinfer_gpu_tests" "$tests" 2>&1 | tee -a "$out/prefill_sm90_tests.log" | tail -3 ||
    status=1
done
pkg_a=$root/generated/aotinfer-prefill-sm90-sm_90a/package
echo "== compute-sanitizer memcheck: sm_90a prefill"
AOTINFER_TEST_PACKAGE=$pkg_a timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$build/tests/aotinfer_gpu_tests" "$tests" "~[long]" 2>&1 | tee -a "$out/prefill_sm90_sanitizer.log" | tail -3 || status=1
echo "== compute-sanitizer racecheck: sm_90a prefill, variant sweep"
AOTINFER_TEST_PACKAGE=$pkg_a timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
  "$build/tests/aotinfer_gpu_tests" "batch_prefill matches the fp64 reference for every prefill variant in the package" 2>&1 |
  tee -a "$out/prefill_sm90_sanitizer.log" | tail -2 || status=1
# The custom-mask test too: the producer's scan of the mask and the words it stages are the
# kernel's most intricate shared-memory handoffs, which the variant sweep does not run.
echo "== compute-sanitizer racecheck: sm_90a prefill, custom masks"
AOTINFER_TEST_PACKAGE=$pkg_a timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 \
  "$build/tests/aotinfer_gpu_tests" "batch_prefill with custom masks*" 2>&1 |
  tee -a "$out/prefill_sm90_sanitizer.log" | tail -2 || status=1
if [ $bench = 1 ]; then
  for arch in sm_90a sm_90; do
    echo "== prefill benchmark: $arch"
    "$build/bench/aotinfer_bench_prefill" "$root/generated/aotinfer-prefill-sm90-$arch/package" "$out/prefill_$arch.jsonl"
  done
  python3 -c "import torch" 2> /dev/null && PYTHONUNBUFFERED=1 python3 "$root/bench/prefill_torch.py" "$out/prefill_sm_90a.jsonl"
fi
exit $status
