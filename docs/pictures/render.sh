#!/usr/bin/env bash
# Renders the README's pictures from the tapes here (demo.tape: the demo's L(x) =
# sum(sigmoid(x)); mlp.tape: the Fashion-MNIST MLP's loss, f32, batch 100).
# Needs a build (reel-opt) and scripts/install-bench-deps.sh (Graphviz, matplotlib).
#   bash docs/pictures/render.sh [build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
opt=$build/tools/reel-opt
"$opt" --dot "$here/demo.tape" | dot -Tsvg -o "$here/demo_tape.svg"
"$opt" --passes=grad,simplify,cse,dce --dot "$here/demo.tape" | dot -Tsvg -o "$here/demo_grad.svg"
"$opt" --passes=grad,simplify,cse,dce --dot-plan "$here/mlp.tape" | dot -Tsvg -o "$here/mlp_grad_kernels.svg"
"$opt" --passes=grad,simplify,cse,dce --print-plan "$here/mlp.tape" > "$here/mlp_grad_plan.txt"
/usr/bin/python3 "$here/../../tools/plan_timeline.py" "$here/mlp_grad_plan.txt" "$here/mlp_grad_plan.png" \
  --title "MLP 784-256-128-10 gradient (f32, batch 100): workspace buffers by step"
echo "wrote $here/{demo_tape,demo_grad,mlp_grad_kernels}.svg and mlp_grad_plan.png"
