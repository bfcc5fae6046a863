#!/usr/bin/env bash
# ringmaster run -f sweep.yaml: a 6-trial TrainingSweep (1-worker trials, 2 at a time) completes;
# median early stopping stops at least one trial, which ends Stopped (reason MedianStop), never
# Failed; -o json's last line is the TrainingSweep with the best trial, which is a succeeded trial
# holding the best objective; no two trials ran under one index; validate names bad paths; nothing is
# left running. Ctrl-C mid-sweep stops every trial (exit 130).
source "$(dirname "$0")/5x-run-lib.bash"
S="$FIX/sweep-small.yaml"

# validate: the sweep and a bad path, named with its line
"$RM_BIN/ringmaster" validate -f "$S" | grep -q 'valid TrainingSweep default/small-sweep: 6 trials' ||
  fail "validate of the fixture"
sed 's/path: training.optimizer.lr,/path: training.optimizer.lrr,/' "$S" > "$W/bad.yaml"
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad.yaml" 2>"$W/bad.err"; rc=$?; set -e
[ $rc -eq 2 ] || fail "validate of a bad path: exit $rc"
grep -q 'bad.yaml:14: spec.parameters\[0\].path: training.optimizer.lrr is not a TrainingJob spec field' "$W/bad.err" ||
  fail "bad path message: $(cat "$W/bad.err")"
sed 's/values: \[0.05, 0.02, 0.0002\]/values: [0.05, fast]/' "$S" > "$W/badv.yaml"
set +e; "$RM_BIN/ringmaster" run -f "$W/badv.yaml" 2>"$W/badv.err"; rc=$?; set -e
[ $rc -eq 2 ] || fail "run of a bad value: exit $rc"
grep -q 'spec.parameters\[0\].values\[1\]: spec.training.optimizer.lr: must be a number' "$W/badv.err" ||
  fail "bad value message: $(cat "$W/badv.err")"

log "6-trial sweep"
run_job sweep -f "$S" -o json
[ $RC -eq 0 ] || fail "sweep exit $RC"
[ "$(jget sweep 'j["kind"]')" = TrainingSweep ] || fail "last line is not a TrainingSweep"
[ "$(jget sweep 'j["status"]["phase"]')" = Succeeded ] || fail "phase $(jget sweep 'j["status"]["phase"]')"
jget sweep 'j["status"]["trials"]' > "$W/counts"
$PY - "$W/sweep.out" <<'PY' || fail "sweep status: $(tail -1 "$W/sweep.out")"
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
st = j["status"]; t = st["trials"]; rows = st["trialStatuses"]
assert t["total"] == 6 and t["pending"] == 0 and t["running"] == 0, t
assert t["succeeded"] + t["failed"] + t["stopped"] == 6, t
assert t["stopped"] >= 1, "early stopping stopped no trial: %s" % t
assert t["failed"] == 0, t
stopped = [r for r in rows if r["phase"] == "Stopped"]
assert all(r["reason"] == "MedianStop" and "worse than the median" in r["message"] for r in stopped), stopped
# a stopped trial was stopped before its last epoch
assert all(r["epoch"] < 4 for r in stopped), stopped
best = st["best"]; ok = [r for r in rows if r["phase"] == "Succeeded"]
top = max(r["objective"] for r in ok)
assert best["objective"] == top and rows[best["index"]]["phase"] == "Succeeded", (best, top)
assert best["trial"] == "small-sweep-%d" % best["index"]
assert sorted(r["index"] for r in rows) == list(range(6))
assert all(len(r["objectives"]) == r["epoch"] for r in rows), rows
print("best", best["trial"], best["objective"], "stopped", [r["index"] for r in stopped])
PY
# every trial ran once: one run folder each, one worker log each
for i in 0 1 2 3 4 5; do
  [ -f "$W/run-sweep/small-sweep-$i/worker-0.log" ] || fail "trial $i has no worker log"
done
[ "$(ls -d "$W"/run-sweep/small-sweep-* | wc -l)" = 6 ] || fail "trial folders: $(ls "$W/run-sweep")"
grep -c 'msg="trial started"' "$W/sweep.err" | grep -qx 6 || fail "trials started: $(grep -c 'trial started' "$W/sweep.err")"
assert_no_workers

log "Ctrl-C mid-sweep"
# long trials (30 epochs), so the sweep is surely still running when it is interrupted
sed 's/epochs: 4/epochs: 30/' "$S" > "$W/long.yaml"
"$RM_BIN/ringmaster" run -f "$W/long.yaml" --checkpoint-dir "$W/ck-int" --run-dir "$W/run-int" \
   >"$W/int.out" 2>"$W/int.err" &
RUNNER_PID=$!
end=$(( $(date +%s) + 90 ))
until ls "$W"/run-int/small-sweep-*/worker-0.log >/dev/null 2>&1 && [ -n "$(our_workers)" ]; do
  [ "$(date +%s)" -ge "$end" ] && fail "no trial worker started within 90 s"
  kill -0 "$RUNNER_PID" 2>/dev/null || fail "the sweep ended before it could be interrupted"
  sleep 0.5
done
kill -INT "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 130 ] || fail "interrupted sweep: exit $rc"
sleep 1
assert_no_workers
log "PASS"
