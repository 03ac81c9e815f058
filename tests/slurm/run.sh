#!/usr/bin/env bash
# A release build through a real Slurm: brings up munge, slurmctld and slurmd on localhost (all
# state in a temp dir, nothing in /etc), submits packaging/slurm/submit.sh for specs/ci.json
# with 3 shards, waits for the merge, and checks that the merged package is byte-identical to
# an unsharded build. Exit 77 (ctest: skipped) without root or Slurm (setup.sh installs it).
#   tests/slurm/run.sh ROOT_OF_CHECKOUT
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
for tool in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/sbin/mungekey; do
  [ -x "$tool" ] || { echo "skipped: $tool is missing (apt install slurm-wlm munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skipped: a local slurmd needs root"; exit 77; }

work=$(mktemp -d /tmp/aotinfer-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log "$work"/out/logs/*.log; do [ -f "$log" ] && { echo "--- $log"; tail -20 "$log"; }; done
  exit 1
}

# munge: a fresh key and socket of our own.
mkdir -p "$work/munge" && chmod 711 "$work/munge"
/usr/sbin/mungekey --create --keyfile="$work/munge/munge.key" --force
/usr/sbin/munged --force --foreground --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/pid" --seed-file="$work/munge/seed" > "$work/munge.log" 2>&1 &
pids+=($!)

host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/ctld" "$work/spool"
export SLURM_CONF=$work/slurm.conf
cat > "$SLURM_CONF" <<CONF
ClusterName=aotinfer-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=build Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

for i in $(seq 50); do [ -S "$work/munge/socket" ] && break; sleep 0.1; done
/usr/sbin/slurmctld -D -i > "$work/slurmctld.out" 2>&1 &
pids+=($!)
/usr/sbin/slurmd -D > "$work/slurmd.out" 2>&1 &
pids+=($!)
for i in $(seq 100); do
  sinfo -h -o %T 2> /dev/null | grep -q idle && break
  sleep 0.3
done
sinfo -h -o %T 2> /dev/null | grep -q idle || fail "the local Slurm node did not come up"
echo "slurm: $(sinfo -h -o '%P %D %T %c')"

spec=$root/specs/ci.json
# Jobs inherit this environment: the same SLURM_CONF, munge socket and compiler cache.
timeout 600 "$root/packaging/slurm/submit.sh" "$spec" "$work/out" 3 --wait --cpus-per-task=1 \
  || fail "the sharded build or its merge failed"
for i in 1 2 3; do grep -q "shard $i/3" "$work/out/logs/shard-$i.log" || fail "shard $i did not run as an array task"; done
echo "merged: $(tail -1 "$work/out/logs/merge.log")"

"$root/build/generator/aotinfer-gen" build "$spec" -o "$work/whole" > "$work/whole.log" 2>&1 || fail "the unsharded build failed"
diff -r "$work/whole/package" "$work/out/release/package" > "$work/diff.log" || fail "merged and unsharded packages differ: $(head -5 "$work/diff.log")"
echo "ok: the Slurm array's merged package is byte-identical to the unsharded build ($(ls "$work/whole/package/kernels" | wc -l) fatbins + manifest)"
