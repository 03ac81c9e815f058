#!/usr/bin/env bash
# The PTX fallback and the 99 KiB decode tiles, on a GPU newer than sm_8x (an H100): a package of
# decode and MLA decode variants (and the merge_state they use) with sm_80 SASS and compute_80 PTX
# (tests/gpu/ptx_decode.json) has no code
# that runs there but PTX, so the driver compiles the sm_80-sized kernels (the ones 99 KiB chips
# run: MLA's 16-row tile among them) and the decode GPU tests check them against the fp64
# reference. The runtime must say
# once per variant that it fell back to PTX (AOTINFER_LOG=1).
# Usage: tests/gpu/ptx_fallback.sh BUILD_DIR   (BUILD_DIR holds tests/aotinfer_gpu_tests)
set -euo pipefail
# (One test spec of wildcards joined by ",": Catch2 3 reads a comma as "or", and ANDs separate arguments.)
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
package=$root/generated/aotinfer-ptx-decode/package
if [ ! -f "$package/manifest.json" ]; then
  gen=$(ls "$build/generator/aotinfer-gen" 2> /dev/null || true)
  [ -n "$gen" ] || { echo "ptx_fallback: no package at $package and no aotinfer-gen to build it (build it where Clang 14 is, then carry it)"; exit 1; }
  "$gen" build "$root/tests/gpu/ptx_decode.json"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
AOTINFER_LOG=1 AOTINFER_TEST_PACKAGE=$package "$build/tests/aotinfer_gpu_tests" \
  "batch_decode matches the fp64 reference across variant axes*,batch_decode batch sizes 1..512*,batch_mla_decode matches the fp64 reference*" \
  2>&1 | tee "$log" ||
  status=1
told=$(grep -c "has no SASS for this GPU" "$log" || true)
variants=$(grep -c '"uri":' "$package/manifest.json")
echo "ptx_fallback: the runtime said PTX $told times for $variants variants"
if [ "$told" -lt 1 ] || [ "$told" -gt "$variants" ]; then
  echo "ptx_fallback: expected one PTX notice per variant loaded (1..$variants)"
  status=1
fi
exit $status
