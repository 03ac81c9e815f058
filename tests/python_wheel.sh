#!/usr/bin/env bash
# Builds the wheel (runtime + specs/ci.json's kernel package) from the build tree, installs it
# offline into a fresh venv, and runs the Python tests there. Usage: python_wheel.sh BUILD_DIR AOTINFER_GEN
set -euo pipefail
build=$1 gen=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$gen" build "$root/specs/ci.json" -o "$work/kernels" > /dev/null
"$root/packaging/stage_wheel.sh" "$build" "$work/kernels/package" "$work/dist" > /dev/null
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --no-index "$work"/dist/aotinfer-*.whl
cd "$work"  # import the installed wheel, not the source tree
"$work/venv/bin/python" -c "import aotinfer; print(aotinfer.Package().variants())"
cp "$root/packaging/python/tests/test_aotinfer.py" "$root/packaging/python/tests/test_flashinfer_cpu.py" \
  "$root/packaging/python/tests/test_cascade_cpu.py" "$root/packaging/python/tests/test_transformers_cpu.py" "$work/"
"$work/venv/bin/python" -m unittest -v test_aotinfer test_flashinfer_cpu test_cascade_cpu test_transformers_cpu 2>&1
