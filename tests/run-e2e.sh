#!/usr/bin/env bash
# Runs every tests/e2e/*.sh (or those named as arguments) with a time limit each, and prints
# one PASS/FAIL line per script and the closing "N passed, N failed" line. Exit 1 if any failed.
# Each script gets RM_BIN (folder of the binaries), RM_ROOT (repo root) and a private TMPDIR.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
export RM_ROOT="$root"
export RM_BIN="${RM_BIN:-$root/bin}"
limit="${E2E_TIMEOUT:-600}"
if [ $# -gt 0 ]; then scripts=("$@"); else scripts=("$root"/tests/e2e/*.sh); fi
pass=0; fail=0; failed=()
logdir="$root/build/e2e-logs"; mkdir -p "$logdir"
for s in "${scripts[@]}"; do
  [ -f "$s" ] || s="$root/tests/e2e/$s"
  name=$(basename "$s" .sh)
  tmp=$(mktemp -d "/tmp/rm-e2e-$name.XXXXXX")
  start=$(date +%s)
  # a script may ask for more time in a header line "# e2e-timeout: SECONDS" (never less than the default)
  slimit=$(sed -n 's/^# e2e-timeout: *\([0-9][0-9]*\)$/\1/p' "$s" | head -1)
  [ -n "$slimit" ] && [ "$slimit" -gt "$limit" ] || slimit=$limit
  if TMPDIR="$tmp" timeout --kill-after=10 "$slimit" bash "$s" >"$logdir/$name.log" 2>&1; then
    pass=$((pass+1)); echo "PASS $name ($(( $(date +%s) - start ))s)"
  else
    rc=$?
    fail=$((fail+1)); failed+=("$name")
    echo "FAIL $name (rc=$rc, $(( $(date +%s) - start ))s) — last lines of $logdir/$name.log:"
    tail -n 40 "$logdir/$name.log" | sed 's/^/    /'
  fi
  rm -rf "$tmp"
done
echo "e2e: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
