#!/usr/bin/env bash
# Installs what the benchmark's comparison scripts use beyond the build: PyTorch
# (python3-torch, for bench/torch_bench.py, run with Debian's /usr/bin/python3). Not
# needed to build Reel or run its tests.
set -euo pipefail
exec bash "$(dirname "$0")/install-deps.sh" python3 python3-torch
