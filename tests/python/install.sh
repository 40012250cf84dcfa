#!/usr/bin/env bash
# cmake --install into a fresh prefix, then import reel from there (not the build tree)
# and compute a gradient. Arguments: build dir, prefix, package dir (relative), python.
set -euo pipefail
build=$1 prefix=$2 site=$3 python=$4
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" > /dev/null
cd "$(mktemp -d)"
PYTHONPATH="$prefix/$site" "$python" - "$prefix/$site" <<'PY'
import os, sys
import reel
assert os.path.dirname(reel.__file__) == os.path.join(sys.argv[1], "reel"), reel.__file__
g = reel.grad(lambda x: reel.sum(x * x), reel.tensor([1.0, 2.0]))
assert g.grads[0].tolist() == [2.0, 4.0], g
print("installed reel imports from", os.path.dirname(reel.__file__))
PY
