#!/usr/bin/env bash
# A bad REEL_CACHE_MAX_MB or an unusable REEL_CACHE_DIR: the process warns once on
# standard error (naming the variable, the value and what it uses instead), then
# compiles and computes as usual. Usage: disk_cache_env.sh <cache_process binary> <work directory>
set -euo pipefail
probe=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# run <name> VAR=value...: the probe with that environment; stdout in $name.out,
# stderr in $name.err; it must succeed.
run() {
  local name=$1
  shift
  env "$@" "$probe" --env > "$name.out" 2> "$name.err" || { cat "$name.out" "$name.err"; fail "$name: exit status $?"; }
  cat "$name.out" "$name.err"
}
warnings() { grep -c 'warning' "$1.err" || true; }

# Bounds that are not a whole number of megabytes: one warning, the default bound.
i=0
for bad in -5 abc 1e3 100000000000000000000 12abc ' 12' '+5' 1099511627776; do
  i=$((i + 1))
  run "mb$i" REEL_CACHE_DIR="$work/cache" REEL_CACHE_MAX_MB="$bad"
  [ "$(warnings "mb$i")" -eq 1 ] || fail "REEL_CACHE_MAX_MB='$bad': expected one warning"
  grep -qF "reel: warning: REEL_CACHE_MAX_MB=\"$bad\" is not a whole number of megabytes from 0 to 1099511627775; using the default bound, 512 MB" "mb$i.err" \
    || fail "REEL_CACHE_MAX_MB='$bad': the warning"
  grep -qx "dir $work/cache max_bytes 536870912" "mb$i.out" || fail "REEL_CACHE_MAX_MB='$bad': not the default bound"
done
# Good ones: no warning; empty is unset.
run mbgood REEL_CACHE_DIR="$work/cache" REEL_CACHE_MAX_MB=7
[ "$(warnings mbgood)" -eq 0 ] || fail "REEL_CACHE_MAX_MB=7 warned"
grep -qx "dir $work/cache max_bytes 7340032" mbgood.out || fail "REEL_CACHE_MAX_MB=7"
run mbempty REEL_CACHE_DIR="$work/cache" REEL_CACHE_MAX_MB=
[ "$(warnings mbempty)" -eq 0 ] || fail "REEL_CACHE_MAX_MB= warned"
grep -qx "dir $work/cache max_bytes 536870912" mbempty.out || fail "REEL_CACHE_MAX_MB="

# Directories that cannot hold the cache: one warning, the cache off, nothing written.
echo "not a directory" > "$work/file"
run dirfile REEL_CACHE_DIR="$work/file"
[ "$(warnings dirfile)" -eq 1 ] || fail "REEL_CACHE_DIR=file: expected one warning"
grep -qF "reel: warning: REEL_CACHE_DIR=\"$work/file\" is not a directory; the persistent code cache is off for this process" dirfile.err \
  || fail "REEL_CACHE_DIR=file: the warning"
grep -qx "dir  max_bytes 536870912" dirfile.out || fail "REEL_CACHE_DIR=file: the cache is not off"
grep -q ' writes 0 ' dirfile.out || fail "REEL_CACHE_DIR=file: wrote"
[ "$(cat "$work/file")" = "not a directory" ] || fail "REEL_CACHE_DIR=file: the file changed"
run dirunder REEL_CACHE_DIR="$work/file/cache"
[ "$(warnings dirunder)" -eq 1 ] || fail "REEL_CACHE_DIR=file/cache: expected one warning"
grep -qF "reel: warning: REEL_CACHE_DIR=\"$work/file/cache\" cannot be created (Not a directory); the persistent code cache is off for this process" dirunder.err \
  || fail "REEL_CACHE_DIR=file/cache: the warning"
grep -qx "dir  max_bytes 536870912" dirunder.out || fail "REEL_CACHE_DIR=file/cache: the cache is not off"
run dirproc REEL_CACHE_DIR=/proc/reel-cannot-be-here
[ "$(warnings dirproc)" -eq 1 ] || fail "REEL_CACHE_DIR=/proc/...: expected one warning"
grep -qF 'reel: warning: REEL_CACHE_DIR="/proc/reel-cannot-be-here" cannot be created (' dirproc.err || fail "REEL_CACHE_DIR=/proc/...: the warning"
# Both bad: one warning for each.
run both REEL_CACHE_DIR="$work/file" REEL_CACHE_MAX_MB=abc
[ "$(warnings both)" -eq 2 ] || fail "both bad: expected two warnings"
grep -q 'REEL_CACHE_DIR=' both.err && grep -q 'REEL_CACHE_MAX_MB=' both.err || fail "both bad: the warnings"

# A relative directory is taken against the current directory (made absolute once),
# and made when missing: no warning, and the entries land there.
run relative REEL_CACHE_DIR=rel/cache
[ "$(warnings relative)" -eq 0 ] || fail "REEL_CACHE_DIR=rel/cache warned"
grep -qx "dir $work/rel/cache max_bytes 536870912" relative.out || fail "REEL_CACHE_DIR=rel/cache: not absolute"
ls "$work"/rel/cache/*.reelobj > /dev/null || fail "REEL_CACHE_DIR=rel/cache: no entry written"
# off: no warning.
run off REEL_CACHE_DIR=off
[ "$(warnings off)" -eq 0 ] || fail "REEL_CACHE_DIR=off warned"
grep -qx "dir  max_bytes 536870912" off.out || fail "REEL_CACHE_DIR=off"
echo "ok: bad cache settings are reported once and do not stop compiling"
