#!/usr/bin/env bash
# A death anywhere around an epoch boundary (docs/architecture.md#robustness) never livelocks the ring.
# One job (fixtures/window.yaml: 117 steps an epoch, checkpoints every 10) gets one kill at every step
# from 115 to 121 — before the boundary at 117, on it, between it and the checkpoint at 120 (the
# window where a survivor used to remember an evaluation its replacement had still to run, and
# the two desynchronised forever), on the checkpoint and after it — alternating the rank that
# dies. Each fault fires once per job, so the job must finish: Succeeded, exactly 2 x 117 = 234
# steps, one restart per kill, and no "desync" in any worker log. The run is bounded: a livelock
# shows up as the timeout.
source "$(dirname "$0")/5x-run-lib.bash"
faults=""
kills=0
for s in $(seq 115 121); do
  faults="${faults:+$faults;}exit:rank=$((s % 2)):step=$s"
  kills=$((kills + 1))
done
set +e
RINGMASTER_FAULT="$faults" timeout 300 "$RM_BIN/ringmaster" run -f "$FIX/window.yaml" \
    --checkpoint-dir "$W/ck" --run-dir "$W/run" -o json >"$W/win.out" 2>"$W/win.err"
RC=$?
set -e
[ $RC -ne 124 ] || fail "job did not finish within 300 s (livelock?) — $(grep -c 'rendezvous round closed' "$W/win.err") rounds"
[ $RC -eq 0 ] || fail "job exit $RC"
[ "$(jget win 'j["status"]["phase"]')" = Succeeded ] || fail "phase $(jget win 'j["status"]["phase"]')"
steps=$(jget win 'j["status"]["result"]["steps"]')
[ "$steps" = 234 ] || fail "steps $steps, want 234"
restarts=$(jget win 'j["status"]["restarts"]')
[ "$restarts" = "$kills" ] || fail "restarts $restarts, want $kills (one per kill)"
fired=$(ls -A "$W/ck" | grep -c '^\.fault-.*-fired$' || true)
[ "$fired" = "$kills" ] || fail "$fired faults fired, want $kills"
if grep -l 'desync' "$W"/run/worker-*.log >/dev/null 2>&1; then
  fail "a worker log reports a desync: $(grep -h desync "$W"/run/worker-*.log | head -3)"
fi
assert_no_workers
log "PASS kills=$kills steps=$steps restarts=$restarts rounds=$(grep -c 'rendezvous round closed' "$W/win.err")"
