#!/usr/bin/env bash
# README "Failure semantics" row F9.
# An outsider without the token (docs/architecture.md#robustness): while a 2-worker job trains, open
# 120 silent connections to every worker's ring port and send one HELLO forged for the next epoch
# (right magic, version, ranks; it never proves the token), keep them all open, then kill -9 one
# worker. The group must re-form at once as if nobody were there: the job Succeeds with restarts 1
# and the ring forms within 2 s of the round closing (before the fix the strangers sat in the listen backlog,
# the re-formation spent its 10 s deadline on them and every recovery failed).
source "$(dirname "$0")/5x-run-lib.bash"
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 10 --checkpoint-dir "$W/ck" \
   --run-dir "$W/run" -o json >"$W/s.out" 2>"$W/s.err" &
RUNNER_PID=$!
# (a folder listing, not a glob: pruning may remove a matched file before ls reaches it)
has_ckpt() { ls "$W/ck" 2>/dev/null | grep -q '^ckpt-.*\.rmck$'; }
for i in $(seq 1 600); do
  has_ckpt && break
  sleep 0.1
done
has_ckpt || fail "no checkpoint within 60 s"
epoch=$(grep -o 'msg="round ready" epoch=[0-9]*' "$W/run/worker-0.log" | tail -1 | grep -o '[0-9]*$')
[ -n "$epoch" ] || fail "no round ready line"
# ring port of each worker = its listening TCP port that is not the logged metrics port
mports=$(grep -ho 'msg="metrics listening" port=[0-9]*' "$W"/run/worker-*.log | grep -o '[0-9]*$' | tr '\n' ' ')
# (worker pids from the runner's log: scanning /proc for them is slow on a busy machine)
wpids=$(grep -o 'msg="worker started" index=[0-9]* pid=[0-9]*' "$W/s.err" | grep -o '[0-9]*$' | tr '\n' ' ')
ports=$($PY "$FIX/outsider.py" ports $wpids --not $mports | tr '\n' ' ')
set -- $ports
[ $# -eq 2 ] || fail "found ring ports '$ports', want 2"
log "ring ports: $ports; forging a HELLO for epoch $((epoch + 1))"
# the outsider: holds its connections open until killed
$PY "$FIX/outsider.py" ring "$((epoch + 1))" $ports >"$W/probe.out" 2>&1 &
PROBE_PID=$!
for i in $(seq 1 50); do grep -q "^ready" "$W/probe.out" && break; sleep 0.1; done
grep -q "^ready" "$W/probe.out" || { kill $PROBE_PID; fail "probe did not start: $(cat "$W/probe.out")"; }
victim=$(grep -o 'msg="worker started" index=1 pid=[0-9]*' "$W/s.err" | head -1 | grep -o '[0-9]*$')
kill -9 "$victim"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
kill $PROBE_PID 2>/dev/null || true; wait $PROBE_PID 2>/dev/null || true
[ $rc -eq 0 ] || fail "run exit $rc"
[ "$(jget s 'j["status"]["phase"]')" = Succeeded ] || fail "phase $(jget s 'j["status"]["phase"]')"
[ "$(jget s 'j["status"]["restarts"]')" = 1 ] || fail "restarts $(jget s 'j["status"]["restarts"]') != 1"
grep -q 'reason="stale epoch\|reason="handshake not finished\|reason="too many unfinished\|reason="closed before' \
  "$W"/run/worker-*.log || fail "no worker logged dropping a stranger"
grep -q 'wrong token' "$W"/run/worker-*.log "$W/s.err" && fail "a stranger was reported as a wrong token"
rec=$(grep -o 'recoveries, mean [0-9.]*s, worst [0-9.]*s' "$W/s.err" || true)
# the recovery includes the replacement's start (data loading: seconds on a busy machine); the
# part the strangers attacked is the ring formation, from the round closing to training again
form=$($PY - "$W/s.err" <<'PY'
import re, sys, datetime
t = lambda l: datetime.datetime.strptime(re.search(r"ts=(\S+)Z", l).group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
lines = open(sys.argv[1]).read().splitlines()
closed = [t(l) for l in lines if 'msg="rendezvous round closed"' in l and "epoch=2 " in l]
again = [t(l) for l in lines if 'msg="group training again"' in l]
print(f"{again[0] - closed[0]:.3f}" if closed and again else "none")
PY
)
[ "$form" != none ] || fail "no epoch-2 round / training-again lines"
$PY -c "import sys; sys.exit(0 if $form < 2.0 else 1)" || fail "ring formation after the kill took $form s"
assert_no_workers
log "PASS restarts=1, ring formed ${form}s after the round closed; $rec"
