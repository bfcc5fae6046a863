#!/usr/bin/env bash
# Runs every tests/e2e/*.sh (or those named as arguments) with a time limit each, and prints
# one PASS/FAIL line per script (as each finishes) and the closing "N passed, N failed" line.
# Exit 1 if any failed. Each script gets RM_BIN (folder of the binaries), RM_ROOT (repo root) and a
# private TMPDIR.
#
# Parallelism: E2E_JOBS scripts run at once (default 2). So that they cannot meet on a port, each
# runs in its own network namespace (`unshare -n`, loopback up) — the scripts only use loopback.
# A script that needs the host's own network namespace says so in a header line
# "# e2e-host: REASON" (podman, `ip netns` nodes); host scripts run one at a time among themselves,
# beside namespaced ones. Where `unshare -n` is refused (not root), everything runs one at a time.
# A script may ask for more time with a header line "# e2e-timeout: SECONDS" (never less than the
# default E2E_TIMEOUT).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
export RM_ROOT="$root"
export RM_BIN="${RM_BIN:-$root/bin}"
limit="${E2E_TIMEOUT:-600}"
jobs="${E2E_JOBS:-2}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "E2E_JOBS must be a positive integer, not '$jobs'" >&2; exit 2; }
if [ $# -gt 0 ]; then scripts=("$@"); else scripts=("$root"/tests/e2e/*.sh); fi
logdir="$root/build/e2e-logs"; mkdir -p "$logdir"

if [ "$jobs" -gt 1 ] && ! unshare -n sh -c 'ip link set lo up' 2>/dev/null; then
  echo "e2e: cannot make network namespaces here (unshare -n); running one script at a time"
  jobs=1
fi

# host scripts first: they are the long ones and cannot overlap each other
host=(); ns=()
for s in "${scripts[@]}"; do
  [ -f "$s" ] || s="$root/tests/e2e/$s"
  if [ "$jobs" -gt 1 ] && grep -q '^# e2e-host:' "$s" 2>/dev/null; then host+=("$s"); else ns+=("$s"); fi
done
pending=("${host[@]}" "${ns[@]}")

# one script: runs in the background, writes its log; its exit status is the script's
run_one() { # $1 script, $2 1 = host namespace
  local s=$1 name tmp slimit rc=0
  name=$(basename "$s" .sh)
  tmp=$(mktemp -d "/tmp/rm-e2e-$name.XXXXXX")
  slimit=$(sed -n 's/^# e2e-timeout: *\([0-9][0-9]*\)$/\1/p' "$s" 2>/dev/null | head -1)
  [ -n "$slimit" ] && [ "$slimit" -gt "$limit" ] || slimit=$limit
  if [ "$2" = 1 ] || [ "$jobs" = 1 ]; then
    TMPDIR="$tmp" timeout --kill-after=10 "$slimit" bash "$s" >"$logdir/$name.log" 2>&1 || rc=$?
  else
    TMPDIR="$tmp" timeout --kill-after=10 "$slimit" \
      unshare -n bash -c 'ip link set lo up && exec bash "$0"' "$s" >"$logdir/$name.log" 2>&1 || rc=$?
  fi
  rm -rf "$tmp"
  return $rc
}

pass=0; fail=0; failed=()
declare -A pid_script=() pid_start=() pid_host=()
host_busy=0
finish() { # $1 pid, $2 status
  local p=$1 rc=$2 s name
  s=${pid_script[$p]}; name=$(basename "$s" .sh)
  [ "${pid_host[$p]}" = 1 ] && host_busy=0
  if [ "$rc" -eq 0 ]; then
    pass=$((pass+1)); echo "PASS $name ($(( $(date +%s) - pid_start[$p] ))s)"
  else
    fail=$((fail+1)); failed+=("$name")
    echo "FAIL $name (rc=$rc, $(( $(date +%s) - pid_start[$p] ))s) — last lines of $logdir/$name.log:"
    tail -n 40 "$logdir/$name.log" | sed 's/^/    /'
  fi
  unset "pid_script[$p]" "pid_start[$p]" "pid_host[$p]"
}
while [ ${#pending[@]} -gt 0 ] || [ ${#pid_script[@]} -gt 0 ]; do
  # start what may start: a free slot, and for a host script no other host script running
  while [ ${#pid_script[@]} -lt "$jobs" ] && [ ${#pending[@]} -gt 0 ]; do
    pick=-1
    for i in "${!pending[@]}"; do
      is_host=0; for h in "${host[@]}"; do [ "$h" = "${pending[$i]}" ] && is_host=1; done
      if [ $is_host = 0 ] || [ $host_busy = 0 ]; then pick=$i; break; fi
    done
    [ $pick -ge 0 ] || break
    s=${pending[$pick]}; pending=("${pending[@]:0:$pick}" "${pending[@]:$((pick+1))}")
    is_host=0; for h in "${host[@]}"; do [ "$h" = "$s" ] && is_host=1; done
    [ $is_host = 1 ] && host_busy=1
    run_one "$s" "$is_host" &
    pid_script[$!]=$s; pid_start[$!]=$(date +%s); pid_host[$!]=$is_host
  done
  done_pid=
  wait -n -p done_pid "${!pid_script[@]}"; rc=$?
  [ -n "$done_pid" ] && finish "$done_pid" "$rc"
done
echo "e2e: $pass passed, $fail failed${failed:+ (${failed[*]})}"
[ "$fail" -eq 0 ]
