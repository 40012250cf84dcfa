#!/usr/bin/env bash
# Installs what the benchmark's comparison scripts and the training example use beyond
# the build: PyTorch (bench/torch_bench.py and bench/train_epoch.py, run with Debian's
# /usr/bin/python3), matplotlib (the example's learning curve, tools/plan_timeline.py), Graphviz
# (rendering reel-opt --dot pictures) and the Fashion-MNIST
# data set. Not needed to build Reel or run its tests.
set -euo pipefail
exec bash "$(dirname "$0")/install-deps.sh" python3 python3-torch python3-matplotlib dataset-fashion-mnist graphviz
