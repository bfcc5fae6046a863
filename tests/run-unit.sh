#!/usr/bin/env bash
# Runs the CUnit binary's suites side by side: UNIT_JOBS processes at once (default 3), each
# `unit-tests --exact SUITE`, the longest suites first (most of them wait on sockets, child
# processes and timeouts, not on the CPU, so a 2-core machine still gains). Prints one PASS/FAIL
# line per suite as it ends, the failed suites' logs, and the closing
# "unit: N passed, M failed" line (tests, not suites). Exit 1 if any test failed.
# Usage: tests/run-unit.sh UNIT_BINARY  (RM_BIN, ASAN_OPTIONS, UBSAN_OPTIONS come from the caller)
# Each suite runs in its own network namespace where `unshare -n` works (as tests/run-e2e.sh), so
# no two can meet on a port; logs go to build/unit-logs/SUITE.log.
set -u
bin=${1:?usage: run-unit.sh UNIT_BINARY}
root=$(cd "$(dirname "$0")/.." && pwd)
jobs="${UNIT_JOBS:-3}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "UNIT_JOBS must be a positive integer, not '$jobs'" >&2; exit 2; }
logdir="$root/build/unit-logs"; rm -rf "$logdir"; mkdir -p "$logdir"
mapfile -t all < <("$bin" --list) || { echo "unit: $bin --list failed" >&2; exit 2; }
[ ${#all[@]} -gt 0 ] || { echo "unit: no suites" >&2; exit 2; }
ns=1; unshare -n sh -c 'ip link set lo up' 2>/dev/null || ns=0

# the long ones first (seconds on an idle 2-core machine, measured); the rest in --list order
first=(train_multi train_multi_optim train_multi_sharding ps_registry shm hier gpt_torch ring rdzv)
order=()
for s in "${first[@]}"; do printf '%s\n' "${all[@]}" | grep -qx "$s" && order+=("$s"); done
for s in "${all[@]}"; do printf '%s\n' "${first[@]}" | grep -qx "$s" || order+=("$s"); done

run_one() { # $1 suite
  if [ $ns = 1 ]; then
    unshare -n bash -c 'ip link set lo up && exec "$0" --exact "$1"' "$bin" "$1" >"$logdir/$1.log" 2>&1
  else
    "$bin" --exact "$1" >"$logdir/$1.log" 2>&1
  fi
}

passed=0; failed=0; bad=(); t_all=$(date +%s)
declare -A pid_suite=() pid_start=()
finish() { # $1 pid $2 rc
  local s=${pid_suite[$1]} line p f
  line=$(grep -o 'unit: [0-9]* passed, [0-9]* failed' "$logdir/$s.log" | tail -1)
  p=$(echo "$line" | awk '{print $2}'); f=$(echo "$line" | awk '{print $4}')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
  if [ "$2" -eq 0 ] && [ -n "$line" ]; then
    echo "PASS $s ($(( $(date +%s) - pid_start[$1] ))s, ${p} tests)"
  else
    [ -n "$line" ] && [ "${f:-0}" -gt 0 ] || failed=$((failed + 1))   # crashed: count it once
    bad+=("$s")
    echo "FAIL $s (rc=$2, $(( $(date +%s) - pid_start[$1] ))s) — $logdir/$s.log:"
    grep -E 'FAILED|Test:.*\.\.\.FAILED|^ +[0-9]+\. |ERROR|runtime error|Sanitizer' "$logdir/$s.log" | head -40 | sed 's/^/    /'
    tail -n 15 "$logdir/$s.log" | sed 's/^/    /'
  fi
  unset "pid_suite[$1]" "pid_start[$1]"
}
i=0
while [ $i -lt ${#order[@]} ] || [ ${#pid_suite[@]} -gt 0 ]; do
  while [ ${#pid_suite[@]} -lt "$jobs" ] && [ $i -lt ${#order[@]} ]; do
    s=${order[$i]}; i=$((i + 1))
    run_one "$s" & pid_suite[$!]=$s; pid_start[$!]=$(date +%s)
  done
  wait -n -p done_pid; rc=$?
  [ -n "${done_pid:-}" ] && [ -n "${pid_suite[$done_pid]:-}" ] && finish "$done_pid" "$rc"
  done_pid=
done
echo "unit: $passed passed, $failed failed (${#order[@]} suites, $jobs at a time, $(( $(date +%s) - t_all ))s)"
[ ${#bad[@]} -eq 0 ] || { echo "unit: failed suites: ${bad[*]}"; exit 1; }
