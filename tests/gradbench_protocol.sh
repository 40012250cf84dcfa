#!/usr/bin/env bash
# reel-gradbench on the protocol's edges: the hello eval, an unknown module, unknown
# and missing fields, bad input, an unknown kind; then malformed JSON, which ends the
# session with a message (exit status 1), never a crash.
set -uo pipefail
tool=$1
out=$(printf '%s\n' \
  '{"id": 0, "kind": "start", "eval": "hello"}' \
  '{"id": 1, "kind": "define", "module": "hello"}' \
  '{"id": 2, "kind": "evaluate", "module": "hello", "function": "square", "input": 3.0}' \
  '{"id": 3, "kind": "define", "module": "nope"}' \
  '{"id": 4, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"y": [1]}}' \
  '{"id": 5, "kind": "evaluate", "module": "lse", "function": "nope", "input": {}}' \
  '{"id": 6, "kind": "evaluate", "module": "lse"}' \
  '{"id": 7, "kind": "analysis", "of": 2, "valid": true}' \
  '{"id": 8, "kind": "mystery"}' \
  '{"id": 9, "kind": "evaluate", "module": "lse", "function": "primal", "input": {"x": [1, 2, 3], "min_runs": 3, "min_seconds": 0}}' \
  '{"id": 10, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": "no", "s": 1}}' \
  | "$tool")
status=$?
echo "$out"
check() { grep -qF -- "$1" <<<"$out" || { echo "missing: $1"; exit 1; }; }
[ "$status" -eq 0 ] || { echo "exit status $status"; exit 1; }
check '{"id":0,"tool":"reel"}'
check '{"id":1,"success":true}'
check '"id":2,"output":9.0,"success":true'
check '{"error":"define: no module named nope","id":3,"success":false}'
check '"error":"evaluate: the input has no field x","id":4,"success":false'
check '"error":"evaluate: module lse has no function nope","id":5'
check '"error":"evaluate: the message has no function","id":6'
check '{"id":7}'
check '{"id":8}'
check '"error":"evaluate: expected x to be an array","id":10'
[ "$(grep -o '"name":"evaluate"' <<<"$(grep '"id":9' <<<"$out")" | wc -l)" -eq 3 ] || { echo "id 9: expected 3 runs"; exit 1; }
bad=$(printf '%s\n' '{"id": 0, "kind": "start"}' '{not json' | "$tool" 2>&1)
status=$?
echo "$bad"
[ "$status" -eq 1 ] || { echo "malformed JSON: exit status $status, expected 1"; exit 1; }
grep -q "is not JSON" <<<"$bad" || exit 1
echo "ok"
