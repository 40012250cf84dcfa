#!/usr/bin/env bash
# Several processes compile the same program into one empty code-cache directory at
# once (each writes the entry: the renames race), then one more process must load it
# intact. Usage: disk_cache_processes.sh <cache_process binary> <work directory>
set -euo pipefail
probe=$1
dir=$2/cache
rm -rf "$dir"
mkdir -p "$2"
pids=()
for i in 1 2 3 4 5 6; do
  "$probe" "$dir" > "$2/out.$i" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
cat "$2"/out.*
# Every process computed the same value, and the entry left behind is whole.
test "$(awk '{print $2}' "$2"/out.* | sort -u | wc -l)" -eq 1
ls -la "$dir"
test "$(ls "$dir" | grep -c '\.tmp\.')" -eq 0
"$probe" "$dir" | tee "$2/out.last"
grep -q ' hits [1-9][0-9]* misses 0 writes 0 rejected 0$' "$2/out.last"
test "$(awk '{print $2}' "$2"/out.* | sort -u | wc -l)" -eq 1
echo "ok: concurrent writers left a whole entry"
