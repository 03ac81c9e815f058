#!/usr/bin/env bash
# Installs the build tree into a fresh prefix, builds tests/consumer against it with
# find_package, and runs it: once finding the package beside the installed library, once
# through $AOTINFER_PACKAGE. Usage: run.sh BUILD_DIR AOTINFER_GEN
set -euo pipefail
build=$1 gen=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
"$gen" build "$here/../../specs/ci.json" -o "$work/kernels" > /dev/null
variants=$("$gen" list "$here/../../specs/ci.json" | sed -n 's/^\([0-9]*\) variants of .*/\1/p')
cmake -S "$here" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/consumer" > /dev/null

# No kernel package installed and none named: a clear error, not a crash.
if "$work/consumer/consumer" 2> "$work/err"; then echo "expected a missing-package error"; exit 1; fi
grep -q "no default kernel package" "$work/err" || { cat "$work/err"; exit 1; }

mkdir -p "$work/prefix/share/aotinfer"
cp -r "$work/kernels/package" "$work/prefix/share/aotinfer/package"
out=$("$work/consumer/consumer")
echo "$out" | grep -q "^$variants variants$" || { echo "consumer: $out"; exit 1; }
echo "$out" | grep -q "$work/prefix/share/aotinfer/package" || { echo "consumer did not use the installed package: $out"; exit 1; }
# A static program has no library to look beside: it names its package.
for exe in consumer consumer_static; do
  out=$(AOTINFER_PACKAGE="$work/kernels/package" "$work/consumer/$exe")
  echo "$out" | grep -q "^$variants variants$" || { echo "$exe: $out"; exit 1; }
  echo "$out" | grep -q "$work/kernels/package" || { echo "$exe ignored AOTINFER_PACKAGE: $out"; exit 1; }
done
echo "consumer: find_package, link (shared and static), default package and AOTINFER_PACKAGE all work"
