#!/usr/bin/env bash
# Where the Fashion-MNIST example writes its curve: by default <build>/fashion_mnist of
# the build tree the executable is in, wherever it is run from, never the current
# directory (run from the checkout, that would be a file in the checkout); --out DIR
# elsewhere. Runs a copy of the executable placed in a build tree of its own, on a
# tiny made-up data set (the real one need not be installed), one short epoch.
# Usage: fashion_mnist_out.sh <fashion_mnist_train binary> <work directory>
set -euo pipefail
exe=$1
work=$2
rm -rf "$work"
mkdir -p "$work/data" "$work/build/examples" "$work/elsewhere"
cp "$exe" "$work/build/examples/fashion_mnist_train"
fail() { echo "FAIL: $*"; exit 1; }

# IDX files (gzipped): images [n, 28, 28] and labels [n] (0..9), unsigned bytes.
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
images() { { printf '\x00\x00\x08\x03'; be32 "$1"; be32 28; be32 28; head -c $(($1 * 784)) /dev/urandom; } | gzip -c > "$2"; }
labels() { { printf '\x00\x00\x08\x01'; be32 "$1"; for ((i = 0; i < $1; i++)); do printf "\\x0$((i % 10))"; done; } | gzip -c > "$2"; }
images 200 "$work/data/train-images-idx3-ubyte.gz"
labels 200 "$work/data/train-labels-idx1-ubyte.gz"
images 20 "$work/data/t10k-images-idx3-ubyte.gz"
labels 20 "$work/data/t10k-labels-idx1-ubyte.gz"

train() { REEL_CACHE_DIR=off OPENBLAS_NUM_THREADS=1 "$work/build/examples/fashion_mnist_train" --data "$work/data" --epochs 1 "$@"; }
check_curve() {
  [ -f "$1" ] || fail "no $1"
  head -1 "$1" | grep -qx 'epoch,step,train_loss,test_accuracy' || fail "$1: not a curve"
  # Two batches of 100: one loss row at step 2, then the test accuracy.
  grep -q '^1,2,[0-9.]*,$' "$1" || fail "$1: no loss row"
  grep -q '^1,2,,[0-9.]*$' "$1" || fail "$1: no accuracy row"
}

# Run from a directory outside the build tree: the curve goes to the build tree.
out=$(cd "$work/elsewhere" && train)
echo "$out"
check_curve "$work/build/fashion_mnist/curve.csv"
[ -z "$(ls -A "$work/elsewhere")" ] || fail "wrote into the current directory: $(ls -A "$work/elsewhere")"
grep -qF "wrote $work/build/fashion_mnist/curve.csv" <<<"$out" || fail "did not say where it wrote (absolute)"

# Run from the directory holding build/ (the checkout, in the README): the same
# place, shown relative.
rm -rf "$work/build/fashion_mnist"
out=$(cd "$work" && train)
echo "$out"
check_curve "$work/build/fashion_mnist/curve.csv"
[ ! -e "$work/fashion_mnist" ] || fail "wrote fashion_mnist/ into the current directory"
grep -qF "wrote build/fashion_mnist/curve.csv" <<<"$out" || fail "did not say where it wrote (relative)"

# --out DIR: there, relative to the current directory; --quiet says nothing.
rm -rf "$work/build/fashion_mnist"
out=$(cd "$work/elsewhere" && train --out curves --quiet)
check_curve "$work/elsewhere/curves/curve.csv"
[ ! -e "$work/build/fashion_mnist" ] || fail "--out: wrote the default too"
[ -z "$out" ] || fail "--quiet printed: $out"
echo "ok: the curve goes under the build tree, or to --out"
