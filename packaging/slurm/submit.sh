#!/usr/bin/env bash
# A release build on a Slurm cluster: one array task per shard, then a merge that depends on
# all of them. OUT must be on storage every node sees; the checkout's build/ (aotinfer-gen,
# aotinfer) too, or run ./setup.sh there first.
#   packaging/slurm/submit.sh SPEC OUT SHARDS [--wait] [sbatch options...]
# Prints the two job ids; --wait returns when the merge has finished, with its exit status.
# The package lands in OUT/release/package; logs in OUT/logs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 3 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
spec=$(realpath "$1") out=$(realpath -m "$2") shards=$3
shift 3
wait=()
if [ "${1:-}" = "--wait" ]; then wait=(--wait); shift; fi
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: SHARDS must be a positive integer, got '$shards'" >&2; exit 2; }
[ -f "$spec" ] || { echo "submit.sh: no spec file $spec" >&2; exit 2; }
[ -x "$root/build/generator/aotinfer-gen" ] || { echo "submit.sh: build the tools first (./setup.sh)" >&2; exit 2; }
mkdir -p "$out/logs"
array=$(sbatch --parsable --array="1-$shards" --output="$out/logs/shard-%a.log" "$@" \
  "$root/packaging/slurm/build-shard.sbatch" "$root" "$spec" "$out" "$shards")
array=${array%%;*}
echo "shards: job $array (array 1-$shards)"
merge_status=0
sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes --output="$out/logs/merge.log" \
  "${wait[@]}" "$@" "$root/packaging/slurm/merge.sbatch" "$root" "$out" "$shards" > "$out/logs/merge.jobid" || merge_status=$?
echo "merge: job $(cut -d';' -f1 "$out/logs/merge.jobid")"
exit $merge_status
