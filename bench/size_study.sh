#!/usr/bin/env bash
# Kernel-package size per fatbin compression mode and PTX choice, for one spec (CPU only).
# Compiles every variant of the spec once per mode with the package's own flags otherwise and
# prints bytes per variant per arch. Usage: bench/size_study.sh [SPEC] [JOBS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
spec=${1:-$root/specs/fa2-like.json}
jobs=${2:-$(nproc)}
gen=$root/build/generator/aotinfer-gen
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$gen" generate "$spec" -o "$work/gen" > /dev/null
archs=$(python3 -c "import json,sys; print(' '.join(json.load(open('$work/gen/variants.json'))['archs']))")
gencode="" newest=""
for a in $archs; do n=${a#sm_}; gencode="$gencode -gencode=arch=compute_$n,code=sm_$n"; newest=$n; done
variants=$(ls "$work/gen/src" | wc -l)
narchs=$(echo $archs | wc -w)
base="-std=c++17 -O3 -I$root/templates -c -fatbin"
declare -A modes=(
  ["1 uncompressed"]="--no-compress $gencode"
  ["2 compress-all"]="-Xfatbin=-compress-all $gencode"
  ["3 compress-mode=size (default)"]="-Xfatbin=-compress-all --compress-mode=size $gencode"
  ["4 compress-all + PTX of sm_$newest"]="-Xfatbin=-compress-all $gencode -gencode=arch=compute_$newest,code=compute_$newest"
)
echo "spec $(basename "$spec"): $variants variants x $narchs archs ($archs)"
printf "%-36s %12s %14s %10s\n" "mode" "package MiB" "KiB/var/arch" "compile s"
for mode in $(printf '%s\n' "${!modes[@]}" | sort | tr ' ' '#'); do
  mode=${mode//#/ }
  out=$work/out; rm -rf "$out"; mkdir -p "$out"
  start=$(date +%s)
  ls "$work/gen/src" | xargs -P "$jobs" -I{} sh -c "$nvcc $base ${modes[$mode]} -o '$out/{}.fatbin' '$work/gen/src/{}'"
  seconds=$(( $(date +%s) - start ))
  bytes=$(cat "$out"/*.fatbin | wc -c)
  awk -v m="$mode" -v b="$bytes" -v v="$variants" -v a="$narchs" -v s="$seconds" \
    'BEGIN { printf "%-36s %12.2f %14.1f %10d\n", m, b / 1048576, b / 1024 / v / a, s }' 
done
