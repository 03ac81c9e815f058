#!/usr/bin/env bash
# From a fresh clone to installable artifacts for one spec, in dist/:
#   packaging/build.sh [SPEC] [--archs sm_90[,sm_80...]]
# gives aotinfer-<version>-<cpu>.tar.gz and .deb (CPack: runtime, CLI, headers, CMake config,
# pkg-config, the kernel package) and the Python wheel (runtime + kernel package). --archs builds
# a package for a subset of the spec's archs (one .deb or wheel per GPU generation).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
spec=specs/default.json archs=""
while [ $# -gt 0 ]; do
  case $1 in
    --archs) archs=$2; shift 2 ;;
    *) spec=$1; shift ;;
  esac
done
./setup.sh --deps
build=build-release${archs:+-${archs//,/-}}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAOTINFER_BUILD_TESTS=OFF \
  -DAOTINFER_BUILD_PACKAGE=ON -DAOTINFER_PACKAGE_SPEC="$root/$spec" -DAOTINFER_PACKAGE_ARCHS="$archs" > /dev/null
cmake --build "$build"
mkdir -p dist
(cd "$build" && cpack -B "$root/dist" > /dev/null)
rm -rf dist/_CPack_Packages
packaging/stage_wheel.sh "$build" "$build/kernel-package/package" dist
build/runtime/aotinfer list "$build/kernel-package/package" 2>/dev/null | tail -1 || true
ls -la dist
