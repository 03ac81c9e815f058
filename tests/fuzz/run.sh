#!/usr/bin/env bash
# Builds the libFuzzer targets with Clang 14 (ASan + UBSan) in their own build dir and runs each
# for SECONDS, starting from a copy of its seed corpus (tests/fuzz/corpus/<target>/, left
# unchanged). Fails on the first finding: crash, sanitizer report, broken invariant, timeout
# (-timeout=10 per input) or memory beyond -rss_limit_mb=2048; the crashing input is kept in
# BUILD_DIR/findings/<target>/. ctest runs it as the test "fuzz" (label fuzz); docs/FUZZING.md.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]     targets: spec manifest fatbin uri
#                                                       decode_plan prefill_plan (default: all)
# Environment: AOTINFER_FUZZ_CXX / AOTINFER_FUZZ_CC (default clang++-14 / clang-14),
# AOTINFER_FUZZ_JOBS (build jobs, default 2), AOTINFER_FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
seconds=$2
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(spec manifest fatbin uri decode_plan prefill_plan)

cxx=${AOTINFER_FUZZ_CXX:-clang++-14}
cc=${AOTINFER_FUZZ_CC:-clang-14}
for tool in "$cxx" "$cc"; do
  if ! command -v "$tool" > /dev/null; then
    echo "fuzz: $tool not found: install clang-14 and libclang-rt-14-dev (./setup.sh --deps)" >&2
    exit 1
  fi
done

start=$(date +%s)
mkdir -p "$build"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
  -DAOTINFER_FUZZ=ON -DAOTINFER_BUILD_TESTS=OFF -DAOTINFER_BUILD_PACKAGE=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
fuzz_targets=()
for t in "${targets[@]}"; do fuzz_targets+=("fuzz_$t"); done
cmake --build "$build" --target "${fuzz_targets[@]}" -j "${AOTINFER_FUZZ_JOBS:-2}"
echo "fuzz: built in $(( $(date +%s) - start )) s"

symbolizer=$(command -v llvm-symbolizer-14 || ls /usr/lib/llvm-14/bin/llvm-symbolizer 2> /dev/null || true)
[ -z "$symbolizer" ] || export ASAN_SYMBOLIZER_PATH=$symbolizer
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

work=$(mktemp -d "${TMPDIR:-/tmp}/aotinfer-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/fuzz_$t
  corpus=$work/$t
  mkdir -p "$corpus" "$build/findings/$t"
  cp -r "$src/tests/fuzz/corpus/$t/." "$corpus/"
  dict=()
  [ -f "$src/tests/fuzz/dict/$t.dict" ] && dict=("-dict=$src/tests/fuzz/dict/$t.dict")
  log=$build/findings/$t.log
  echo "fuzz: $t for $seconds s"
  # shellcheck disable=SC2086
  if "$exe" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$build/findings/$t/" ${AOTINFER_FUZZ_ARGS:-} > "$log" 2>&1; then
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec)' "$log" | sed "s/^/fuzz: $t: /"
  else
    echo "fuzz: $t FAILED; the input is in $build/findings/$t/, the log in $log:" >&2
    grep -v -E '^#[0-9]+' "$log" | tail -60 >&2
    failed+=("$t")
  fi
done
echo "fuzz: $(( $(date +%s) - start )) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
