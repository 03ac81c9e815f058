#!/usr/bin/env bash
# Every GPU check in one call, for a machine with a GPU:
#   1. build the runtime, GPU tests and benchmarks (generator too when Clang 14 is installed),
#   2. build the packages under test unless they were built elsewhere and carried here,
#   3. run the GPU tests against each package, then again under compute-sanitizer, the PTX
#      fallback check (tests/gpu/ptx_fallback.sh) and, on Hopper, both prefill kernels
#      (tests/gpu/prefill_sm90.sh),
#   4. run the benchmarks (bench/run.sh) unless --no-bench.
# Usage: tests/gpu/run.sh [--no-bench] [PACKAGE_DIR...]
#   (default: the ci and default packages)
# Logs go to $OUT (or build-gpu/out). Every GPU program runs under a time limit, so a kernel
# that never finishes fails its step instead of holding the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
bench=1
packages=()
for arg in "$@"; do
  case $arg in
    --no-bench) bench=0 ;;
    *) packages+=("$arg") ;;
  esac
done
hopper=0
[ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1)" = 9.0 ] && hopper=1
# The last package is the benchmarks'.
[ ${#packages[@]} -gt 0 ] ||
  packages=(generated/aotinfer-ci/package generated/aotinfer-default/package)

generator=OFF
[ -f /usr/lib/llvm-14/lib/cmake/clang/ClangConfig.cmake ] && generator=ON
echo "== configure (generator $generator)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DAOTINFER_BUILD_GENERATOR=$generator \
  -DCMAKE_PREFIX_PATH="$root/.deps" > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
echo "== build"
ninja -C build-gpu aotinfer aotinfer_gpu_tests aotinfer_bench aotinfer_bench_decode aotinfer_bench_prefill aotinfer_bench_mla_decode aotinfer_bench_specdec > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }

if [ $generator = ON ]; then
  ninja -C build-gpu aotinfer-gen >> "$out/build.log" 2>&1
  build-gpu/generator/aotinfer-gen build specs/ci.json
  build-gpu/generator/aotinfer-gen build specs/default.json
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
status=0
for pkg in "${packages[@]}"; do
  [ -f "$pkg/manifest.json" ] || { echo "missing package $pkg (build it with aotinfer-gen build, then carry it)"; exit 1; }
  echo "== GPU tests: $pkg"
  AOTINFER_TEST_PACKAGE=$pkg timeout 300 build-gpu/tests/aotinfer_gpu_tests 2>&1 | tee -a "$out/gpu_tests.log" || status=1
  # The sanitizers slow kernels 10-100x: they run every test but the [long] ones.
  echo "== compute-sanitizer memcheck: $pkg"
  AOTINFER_TEST_PACKAGE=$pkg timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 --leak-check full \
    build-gpu/tests/aotinfer_gpu_tests "~[long]" 2>&1 | tee -a "$out/sanitizer.log" | tail -4 || status=1
  if [ "$pkg" = "${packages[0]}" ]; then  # racecheck is the slowest tool: the first package only
    echo "== compute-sanitizer racecheck: $pkg"
    AOTINFER_TEST_PACKAGE=$pkg timeout 400 compute-sanitizer --tool racecheck --error-exitcode 9 \
      build-gpu/tests/aotinfer_gpu_tests "~[long]" 2>&1 | tee -a "$out/sanitizer.log" | tail -2 || status=1
  fi
done

# The PTX fallback: decode kernels sized for 99 KiB chips, compiled by the driver from PTX.
if [ -f generated/aotinfer-ptx-decode/package/manifest.json ] || [ $generator = ON ]; then
  echo "== PTX fallback"
  bash tests/gpu/ptx_fallback.sh build-gpu 2>&1 | tee -a "$out/ptx_fallback.log" | tail -3 || status=1
fi

# Both prefill kernels on a Hopper GPU (the benchmark of the two: tests/gpu/prefill_sm90.sh alone).
if [ $hopper = 1 ] &&
  { [ -f generated/aotinfer-prefill-sm90-sm_90a/package/manifest.json ] || [ $generator = ON ]; }; then
  echo "== prefill, both kernels"
  bash tests/gpu/prefill_sm90.sh build-gpu --no-bench 2>&1 | tee -a "$out/prefill_sm90.log" | grep -E "^==|passed|failed|SUMMARY" ||
    status=1
fi

# The Python layer with PyTorch (a wheel built elsewhere and carried in dist/, if any).
if ls dist/aotinfer-*.whl > /dev/null 2>&1; then
  bash tests/gpu/python.sh $([ $bench = 1 ] || echo --no-bench) || status=1
fi

if [ $bench = 1 ]; then
  AOTINFER_BENCH_PACKAGE=${packages[-1]} bash bench/run.sh 2>&1 | tee "$out/bench.log" || status=1
fi
echo "== GPU run finished with status $status"
exit $status
