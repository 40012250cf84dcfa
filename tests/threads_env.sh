#!/usr/bin/env bash
# REEL_NUM_THREADS: a count sets the threads (at most one per core; 0: every core);
# unset, every core; a bad value warns once on standard error (naming it) and uses every
# core. Each run's compiled results match one thread's bit for bit.
# Usage: threads_env.sh <threads_probe binary>
set -euo pipefail
probe=$1
cores=$(nproc)
fail() { echo "FAIL: $*"; exit 1; }
# run VALUE|-: the probe with REEL_NUM_THREADS=VALUE (- : unset); its output in $out, $err.
run() {
  local out_file err_file
  out_file=$(mktemp) err_file=$(mktemp)
  if [ "$1" = - ]; then
    env -u REEL_NUM_THREADS "$probe" > "$out_file" 2> "$err_file" || { cat "$out_file" "$err_file"; fail "unset: exit status"; }
  else
    REEL_NUM_THREADS="$1" "$probe" > "$out_file" 2> "$err_file" || { cat "$out_file" "$err_file"; fail "'$1': exit status"; }
  fi
  out=$(cat "$out_file") err=$(cat "$err_file")
  rm -f "$out_file" "$err_file"
  echo "REEL_NUM_THREADS=$1: $out $err"
}
run -
grep -qx "threads $cores" <<< "$out" || fail "unset: expected every core ($cores)"
[ -z "$err" ] || fail "unset: unexpected stderr"
for n in 1 2 3 7 0; do
  run "$n"
  want=$(( n == 0 || n > cores ? cores : n ))
  grep -qx "threads $want" <<< "$out" || fail "REEL_NUM_THREADS=$n: expected $want"
  [ -z "$err" ] || fail "REEL_NUM_THREADS=$n: unexpected stderr"
done
for bad in -3 abc 2x ' 4' +4 99999999999999999999 4097; do
  run "$bad"
  grep -qx "threads $cores" <<< "$out" || fail "REEL_NUM_THREADS='$bad': expected every core"
  [ "$(grep -c warning <<< "$err")" -eq 1 ] || fail "REEL_NUM_THREADS='$bad': expected one warning"
  grep -qF "reel: warning: REEL_NUM_THREADS=\"$bad\" is not a thread count from 0 to 4096; using every core ($cores)" <<< "$err" \
    || fail "REEL_NUM_THREADS='$bad': the warning's text"
done
echo "PASS"
