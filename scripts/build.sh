#!/usr/bin/env bash
# Configures and builds Reel (Release) in ./build: everything (library, tests,
# benchmarks, Python module) by default, or only the targets given as arguments and
# what they need (scripts/demo.sh builds reel_demo alone).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
targets=()
if (($#)); then targets=(--target "$@"); fi
cmake --build build -j"$(nproc)" "${targets[@]}"
