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

# Sizes: every integer of the input must be one (an integral float such as 4.0 is
# one), within what the tool takes, and agree with the arrays it sizes; never
# truncated (2.5), wrapped (1e19 past int64) or ignored (gmm's n against x).
gmm='"d": 2, "k": 1, "n": 2, "x": [[1, 2], [3, 4]], "m": 0, "gamma": 1.0, "alpha": [0.5], "mu": [[0, 0]], "q": [[0, 0]], "l": [[0]]'
sizes=$(printf '%s\n' \
  '{"id": 20, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1, 2], "n": 1e30}}' \
  '{"id": 21, "kind": "evaluate", "module": "ode", "function": "primal", "input": {"x": [1, 2], "s": 1e19}}' \
  '{"id": 22, "kind": "evaluate", "module": "ode", "function": "gradient", "input": {"x": [1, 2], "s": 10000000000000000000}}' \
  '{"id": 23, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2], "n": 2.5}}' \
  '{"id": 24, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2], "n": 4.0}}' \
  '{"id": 25, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2], "n": 4}}' \
  '{"id": 26, "kind": "evaluate", "module": "llsq", "function": "primal", "input": {"x": [1, 2], "n": -3}}' \
  '{"id": 27, "kind": "evaluate", "module": "det", "function": "primal", "input": {"A": [1, 2, 3, 4], "ell": "2"}}' \
  '{"id": 28, "kind": "evaluate", "module": "det", "function": "gradient", "input": {"A": [1, 2, 3, 4], "ell": 2.000001}}' \
  '{"id": 29, "kind": "evaluate", "module": "ba", "function": "objective", "input": {"n": 1, "m": 1, "p": 1e30, "cam": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "x": [1, 2, 3], "w": 0.5, "feat": [1, 2]}}' \
  '{"id": 30, "kind": "evaluate", "module": "ba", "function": "jacobian", "input": {"n": 1.5, "m": 1, "p": 1, "cam": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "x": [1, 2, 3], "w": 0.5, "feat": [1, 2]}}' \
  "{\"id\": 31, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm/\"n\": 2/\"n\": 3}}}" \
  "{\"id\": 32, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"jacobian\", \"input\": {${gmm/\"d\": 2/\"d\": 3}}}" \
  "{\"id\": 33, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm/\"k\": 1/\"k\": 2}}}" \
  "{\"id\": 34, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm/\"n\": 2/\"n\": 2.5}}}" \
  "{\"id\": 35, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm/\"m\": 0/\"m\": 1e30}}}" \
  "{\"id\": 36, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm/\"n\": 2, /}}}" \
  "{\"id\": 37, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm}}}" \
  '{"id": 38, "kind": "evaluate", "module": "ht", "function": "objective", "input": {"theta": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "us": [], "data": {"model": {"bone_count": 21}}}}' \
  '{"id": 39, "kind": "evaluate", "module": "ht", "function": "objective", "input": {"theta": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "us": [], "data": {"model": {"bone_count": 22, "parents": [-1, 0.5]}}}}' \
  '{"id": 40, "kind": "evaluate", "module": "ht", "function": "objective", "input": {"theta": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "us": [], "data": {"model": {"bone_count": 22, "parents": [-1, 0, 1]}}}}' \
  | "$tool")
status=$?
echo "$sizes"
[ "$status" -eq 0 ] || { echo "sizes: exit status $status"; exit 1; }
out=$sizes
check '{"error":"llsq: \"n\" must be an integer from 2 to 10000000 (the most points this tool takes), got 1e+30","id":20,"success":false}'
check '{"error":"ode: \"s\" must be an integer from 1 to 10000000 (the most steps this tool takes), got 1e+19","id":21,"success":false}'
check '{"error":"ode: \"s\" must be an integer from 1 to 10000000 (the most steps this tool takes), got 10000000000000000000","id":22,"success":false}'
check '{"error":"llsq: \"n\" must be an integer from 2 to 10000000 (the most points this tool takes), got 2.5","id":23,"success":false}'
# n = 4: t = -1, -1/3, 1/3, 1; the gradient of x = [1, 2] is [4, 16/9], for 4.0 as for 4.
check '{"id":24,"output":[4.0,1.777777777777778],"success":true'
check '{"id":25,"output":[4.0,1.777777777777778],"success":true'
check '{"error":"llsq: \"n\" must be an integer from 2 to 10000000 (the most points this tool takes), got -3","id":26,"success":false}'
check '{"error":"det: \"ell\" must be an integer from 1 to 20 (the largest matrix this tool takes), got \"2\"","id":27,"success":false}'
check '{"error":"det: \"ell\" must be an integer from 1 to 20 (the largest matrix this tool takes), got 2.000001","id":28,"success":false}'
check '{"error":"ba: \"p\" must be an integer from 1 to 20000000 (the most observations this tool takes), got 1e+30","id":29,"success":false}'
check '{"error":"ba: \"n\" must be an integer from 1 to 1000000000 (the most cameras this tool takes), got 1.5","id":30,"success":false}'
check '{"error":"gmm: \"n\" is 3 but the number of x'"'"'s rows is 2","id":31,"success":false}'
check '{"error":"gmm: \"d\" is 3 but the length of x'"'"'s rows is 2","id":32,"success":false}'
check '{"error":"gmm: \"k\" is 2 but the length of alpha is 1","id":33,"success":false}'
check '{"error":"gmm: \"n\" must be a positive integer, got 2.5","id":34,"success":false}'
check '{"error":"gmm: \"m\" must be an integer, got 1e+30","id":35,"success":false}'
check '{"error":"evaluate: the input has no field n","id":36,"success":false}'
check '"id":37,"output":-22.20677837978798,"success":true'
check '{"error":"ht: expected the hand model'"'"'s 22 bones, got \"bone_count\" 21","id":38,"success":false}'
check '{"error":"ht: \"parents\"[1] must be an integer from -1 to 20, got 0.5","id":39,"success":false}'
check '{"error":"ht: \"bone_count\" is 22 but \"parents\" has 3","id":40,"success":false}'

# --scalar (GradBench's own C++ with reel::Real): the same readers and outputs for its
# six evals; the others undefined; a build without GradBench's headers says so.
scalar=$(printf '%s\n' \
  '{"id": 50, "kind": "start"}' \
  '{"id": 51, "kind": "define", "module": "kmeans"}' \
  '{"id": 52, "kind": "define", "module": "gmm"}' \
  '{"id": 53, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2], "n": 4}}' \
  '{"id": 54, "kind": "evaluate", "module": "llsq", "function": "gradient", "input": {"x": [1, 2], "n": 2.5}}' \
  "{\"id\": 55, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"objective\", \"input\": {${gmm}}}" \
  "{\"id\": 56, \"kind\": \"evaluate\", \"module\": \"gmm\", \"function\": \"jacobian\", \"input\": {${gmm/\"d\": 2/\"d\": 3}}}" \
  '{"id": 57, "kind": "evaluate", "module": "det", "function": "primal", "input": {"A": [1, 2, 3, 4], "ell": 2}}' \
  | "$tool" --scalar 2>&1)
status=$?
echo "$scalar"
if grep -q "built without its scalar mode" <<<"$scalar"; then
  [ "$status" -eq 2 ] || { echo "--scalar without the mode: exit status $status, expected 2"; exit 1; }
else
  [ "$status" -eq 0 ] || { echo "--scalar: exit status $status"; exit 1; }
  out=$scalar
  check '{"id":50,"tool":"reel-scalar"}'
  check '{"error":"define: module kmeans has no scalar mode (reel-gradbench --scalar answers lse, llsq, ode, det, gmm and lstm; run without --scalar for its tensor mode)","id":51,"success":false}'
  check '{"id":52,"success":true}'
  check '{"id":53,"output":[4.0,1.77777777777777'
  check '{"error":"llsq: \"n\" must be an integer from 2 to 10000000 (the most points this tool takes), got 2.5","id":54,"success":false}'
  check '"id":55,"output":-22.206778379'
  check '{"error":"gmm: \"d\" is 3 but the length of x'"'"'s rows is 2","id":56,"success":false}'
  check '"id":57,"output":-2.0,"success":true'
fi
"$tool" --nope </dev/null 2>/dev/null
[ $? -eq 2 ] || { echo "an unknown option: expected exit status 2"; exit 1; }
echo "ok"
