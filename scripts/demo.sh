#!/usr/bin/env bash
# Installs what is missing, builds the library and the demo (not the tests, benchmarks
# or Python module: scripts/test.sh builds those), and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh reel_demo
./build/examples/reel_demo
