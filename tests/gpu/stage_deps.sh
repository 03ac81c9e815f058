#!/usr/bin/env bash
# Copies the header-only build dependencies (nlohmann/json, Catch2) with their CMake configs
# into .deps/, for a GPU machine that lacks them and cannot install packages (one with Catch2 2
# or 3 and nlohmann/json installed needs nothing). tests/gpu/run.sh picks .deps/ up.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
deps=$root/.deps
rm -rf "$deps"
mkdir -p "$deps/include" "$deps/lib/cmake" "$deps/share/cmake"
cp -r /usr/include/nlohmann /usr/include/catch2 "$deps/include/"
cp -r /usr/lib/cmake/Catch2 "$deps/lib/cmake/"
cp /usr/lib/libCatch2WithMain.a "$deps/lib/"
cp -r /usr/share/cmake/nlohmann_json "$deps/share/cmake/"
echo "staged $(du -sh "$deps" | cut -f1) of header-only dependencies in $deps"
