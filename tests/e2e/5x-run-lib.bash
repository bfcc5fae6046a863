# 5x-run-lib.bash — helpers shared by tests/e2e/5x-run-*.sh (sourced; the .bash suffix keeps
# tests/run-e2e.sh from running it). Every run gets its own folder W under TMPDIR; workers are
# recognised by RINGMASTER_CHECKPOINT_DIR=$W/... in their environment, so the process-table checks
# never confuse them with other tests' workers. Kills only what it started, by pid.
set -euo pipefail
: "${RM_BIN:?RM_BIN must name the binaries folder}"
: "${RM_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
W=$(mktemp -d "${TMPDIR:-/tmp}/rm-run-e2e.XXXXXX")
PY=/usr/bin/python3
FIX="$RM_ROOT/tests/e2e/fixtures"
RUNNER_PID=""

log() { echo "[$(date +%H:%M:%S)] $*"; }
dump() {
  for f in "$W"/*.err "$W"/run*/ringmaster.log "$W"/run*/worker-*.log; do
    [ -f "$f" ] || continue; echo "---- $f (tail)"; tail -n 25 "$f"; done >&2
}
fail() { echo "FAIL: $*" >&2; dump; exit 1; }

# Worker processes of this test (their env names a checkpoint folder under $W).
our_workers() {
  local p
  for p in /proc/[0-9]*; do
    if tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -q "^RINGMASTER_CHECKPOINT_DIR=$W/"; then
      echo "${p#/proc/}"
    fi
  done
}
assert_no_workers() {
  local left
  left=$(our_workers | tr '\n' ' ')
  [ -z "$left" ] || { ps -o pid,ppid,stat,cmd -p ${left// /,} >&2 || true; fail "worker processes left: $left"; }
}
cleanup() {
  local rc=$?
  # the runner, and under run_job's `timeout` the runner it started
  [ -n "$RUNNER_PID" ] && { pkill -9 -P "$RUNNER_PID" 2>/dev/null; kill -9 "$RUNNER_PID" 2>/dev/null; } || true
  local p
  for p in $(our_workers); do kill -9 "$p" 2>/dev/null || true; done
  [ $rc -ne 0 ] && dump || true
  # E2E_KEEP_DIR (debugging a failure): keep the failed script's runs, whole, there
  [ $rc -ne 0 ] && [ -n "${E2E_KEEP_DIR:-}" ] && mkdir -p "$E2E_KEEP_DIR" && cp -a "$W" "$E2E_KEEP_DIR/" 2>/dev/null || true
  rm -rf "$W"
  exit $rc
}
trap cleanup EXIT
trap 'echo "[$(date +%H:%M:%S)] terminated (time limit?)" >&2; exit 143' TERM INT

free_port() { "$RM_ROOT/tests/e2e/free-port.py"; }   # below the ephemeral range: see there

# run_job NAME [ringmaster run args...]: runs in the foreground with its own checkpoint and run
# folders; stdout -> $W/NAME.out, stderr -> $W/NAME.err; sets RC.
# The runner runs in the background and the script waits for it, so that the suite's time limit
# (SIGTERM) interrupts the wait and the EXIT trap dumps the logs (bash runs no trap until a
# foreground child returns). One run has RUN_JOB_TIMEOUT seconds (default 420; SIGTERM, which the
# runner answers by stopping its workers, then SIGKILL 10 s later): a run that hangs fails its
# script with RC 124 and the logs, not the whole suite's time limit.
run_job() {
  local name=$1; shift
  log "run $name: $*"
  set +e
  timeout --kill-after=10 "${RUN_JOB_TIMEOUT:-420}" \
    "$RM_BIN/ringmaster" run --checkpoint-dir "$W/ck-$name" --run-dir "$W/run-$name" "$@" \
      <&0 >"$W/$name.out" 2>"$W/$name.err" &   # <&0: a background job's stdin is /dev/null otherwise (-f -)
  RUNNER_PID=$!
  wait "$RUNNER_PID"
  RC=$?
  RUNNER_PID=""
  [ $RC -ne 124 ] && [ $RC -ne 137 ] || log "run $name: no end after ${RUN_JOB_TIMEOUT:-420} s (RC $RC)"
  set -e
}

# jget NAME EXPR: evaluate a Python expression on the last stdout line (the TrainingJob as `j`).
jget() {
  tail -n 1 "$W/$1.out" | $PY -c "import json,sys; j=json.load(sys.stdin); print($2)"
}

# metrics_until RUN_DIR OUT REGEX...: poll (up to 60 s) the /metrics of the run's workers (each
# logs its port) until one page matches every extended REGEX; that page is left in OUT. 0 when one
# did, 1 otherwise.
metrics_until() {
  local dir=$1 out=$2; shift 2
  local i f port re ok
  for i in $(seq 1 300); do
    for f in "$dir"/worker-*.log; do
      [ -f "$f" ] || continue
      port=$(grep -o 'msg="metrics listening" port=[0-9]*' "$f" | head -1 | grep -o '[0-9]*$' || true)
      [ -n "$port" ] || continue
      curl -fsS --max-time 2 "http://127.0.0.1:$port/metrics" -o "$out" 2>/dev/null || continue
      ok=1
      for re in "$@"; do grep -Eq "$re" "$out" || { ok=0; break; }; done
      [ $ok = 1 ] && return 0
    done
    sleep 0.2
  done
  return 1
}
