#!/usr/bin/env bash
# What batch-invariant plans cost: the decode and prefill benchmarks with the planner's adaptive
# split, a fixed split (SGLang's deterministic mode: 2048 keys for decode, 4096 for prefill) and
# no split, in one run on one GPU. Expects build-gpu/ from tests/gpu/run.sh and a package
# ($AOTINFER_BENCH_PACKAGE or the default package). Rows: $AOTINFER_BENCH_ONLY (bench_util.hpp),
# else every row.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${AOTINFER_BENCH_PACKAGE:-$root/generated/aotinfer-default/package}
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
for split in adaptive fixed:2048 none; do
  echo "== batch_decode, kv_split $split"
  AOTINFER_BENCH_KV_SPLIT=$split "$root/build-gpu/bench/aotinfer_bench_decode" "$pkg" "$out/decode_${split%%:*}.jsonl"
done
for split in adaptive fixed:4096 none; do
  echo "== batch_prefill, kv_split $split"
  AOTINFER_BENCH_KV_SPLIT=$split "$root/build-gpu/bench/aotinfer_bench_prefill" "$pkg" "$out/prefill_${split%%:*}.jsonl"
done
