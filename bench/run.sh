#!/usr/bin/env bash
# Runs every benchmark and its peer in one go on a GPU machine; expects build-gpu/ from
# tests/gpu/run.sh and a package ($AOTINFER_BENCH_PACKAGE or the default package).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${AOTINFER_BENCH_PACKAGE:-$root/generated/aotinfer-default/package}
out=${OUT:-$root/build-gpu/out}
mkdir -p "$out"
have_torch=0
python3 -c "import torch" 2>/dev/null && have_torch=1

echo "== merge_state benchmark ($pkg)"
"$root/build-gpu/bench/aotinfer_bench" "$pkg"
[ $have_torch = 1 ] && PYTHONUNBUFFERED=1 python3 "$root/bench/merge_state_torch.py"

echo
echo "== batch_decode benchmark ($pkg)"
"$root/build-gpu/bench/aotinfer_bench_decode" "$pkg" "$out/decode.jsonl"
if [ $have_torch = 1 ]; then
  PYTHONUNBUFFERED=1 python3 "$root/bench/decode_torch.py" "$out/decode.jsonl"
else
  echo "(PyTorch not installed: peers skipped)"
fi

echo
echo "== batch_prefill benchmark ($pkg)"
"$root/build-gpu/bench/aotinfer_bench_prefill" "$pkg" "$out/prefill.jsonl"
if [ $have_torch = 1 ]; then
  PYTHONUNBUFFERED=1 python3 "$root/bench/prefill_torch.py" "$out/prefill.jsonl"
  # MLA prefill (head_dim 192 / head_dim_vo 128) beside FlashInfer, when its bundle was carried in
  # .peers/ (a copy of ../shared/peers); without it the script's rows read n/a. In a subshell: the
  # bundle's environment stays there, and a failing peer does not end the run.
  echo
  echo "== MLA prefill peer: FlashInfer"
  peer_env=$root/.peers/flashinfer_env.sh
  ( { [ -f "$peer_env" ] && source "$peer_env" "$root/.peers/flashinfer-peer-0.7.2.post1-sm90a.tar.gz"; true; } &&
    PYTHONUNBUFFERED=1 python3 "$root/bench/mla_prefill_peer.py" "$out/prefill.jsonl" ) || echo "(the MLA prefill peer failed)"
else
  echo "(PyTorch not installed: peers skipped)"
fi

echo
echo "== batch_mla_decode benchmark ($pkg)"
"$root/build-gpu/bench/aotinfer_bench_mla_decode" "$pkg" "$out/mla_decode.jsonl"

echo
echo "== speculative verification benchmark ($pkg): the decode kernel and the paged prefill"
"$root/build-gpu/bench/aotinfer_bench_specdec" "$pkg" "$out/specdec.jsonl"
