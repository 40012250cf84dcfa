#!/usr/bin/env bash
# Installs what the benchmark's comparison scripts use beyond the build: PyTorch
# (python3-torch) for bench/torch_bench.py. Not needed to build Reel or run its tests.
set -euo pipefail
packages=(python3 python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
