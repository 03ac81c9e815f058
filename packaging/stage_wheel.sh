#!/usr/bin/env bash
# Builds the Python wheel from a CMake build tree and a kernel package, offline.
# Usage: packaging/stage_wheel.sh BUILD_DIR PACKAGE_DIR OUT_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
package=$(cd "$2" && pwd)
mkdir -p "$3"
out=$(cd "$3" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
stage=$build/wheel-stage
rm -rf "$stage"
cp -r "$root/packaging/python" "$stage"
rm -rf "$stage/tests"
rm -rf "$stage/ext" "$stage/CMakeLists.txt"
cp "$(readlink -f "$build/runtime/libaotinfer.so")" "$stage/aotinfer/libaotinfer.so"
ext=$build/packaging/python/_ext.abi3.so
[ -f "$ext" ] || { echo "stage_wheel: $ext is missing: configure with Python's headers (python3-dev) and build" >&2; exit 1; }
cp "$ext" "$stage/aotinfer/"
strip --strip-debug "$stage/aotinfer/libaotinfer.so" "$stage/aotinfer/_ext.abi3.so"
cp -r "$package" "$stage/aotinfer/package"
python3 -m pip wheel --quiet --no-build-isolation --no-deps --no-index -w "$out" "$stage"
rm -rf "$stage"
ls "$out"/aotinfer-*.whl
