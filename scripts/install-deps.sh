#!/usr/bin/env bash
# Installs the Debian 12 packages Reel builds with, and any packages given as
# arguments, skipping those already present.
set -euo pipefail
packages=(cmake make g++ pkg-config ccache libfmt-dev doctest-dev libopenblas-dev libtbb-dev llvm-19-dev llvm-19-tools zlib1g-dev nlohmann-json3-dev libeigen3-dev
  python3-dev pybind11-dev python3-numpy python3-pytest "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
