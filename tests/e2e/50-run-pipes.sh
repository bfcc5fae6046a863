#!/usr/bin/env bash
# Manifests from pipes: `validate` and `run` read -f once, so `-f <(sed ... job.yaml)` (a pipe that
# cannot be read twice) and `-f -` (stdin) work for a TrainingJob, and a TrainingSweep on stdin is
# recognised as a sweep. A tiny job (the small fixture, 20 steps) runs from each; loopback only.
source "$(dirname "$0")/5x-run-lib.bash"
tiny() { sed 's/^    epochs: 2$/    epochs: 1\n    maxSteps: 20/' "$FIX/small.yaml"; }
tiny | grep -q '^    maxSteps: 20$' || fail "the fixture changed: no epochs line to shorten"

# validate: a pipe, stdin, and a sweep on stdin
"$RM_BIN/ringmaster" validate -f <(tiny) >"$W/vp.out" 2>"$W/vp.err" || fail "validate -f <(...): $(cat "$W/vp.err")"
grep -q 'valid TrainingJob default/small' "$W/vp.out" || fail "validate -f <(...): $(cat "$W/vp.out")"
tiny | "$RM_BIN/ringmaster" validate -f - >"$W/vs.out" 2>"$W/vs.err" || fail "validate -f -: $(cat "$W/vs.err")"
grep -q 'valid TrainingJob default/small' "$W/vs.out" || fail "validate -f -: $(cat "$W/vs.out")"
"$RM_BIN/ringmaster" validate -f - <"$FIX/sweep-small.yaml" >"$W/sw.out" 2>"$W/sw.err" ||
  fail "validate -f - (sweep): $(cat "$W/sw.err")"
grep -q 'valid TrainingSweep default/small-sweep: 6 trials' "$W/sw.out" || fail "sweep on stdin: $(cat "$W/sw.out")"
"$RM_BIN/ringmaster" validate -f <(cat "$FIX/sweep-small.yaml") >"$W/swp.out" 2>"$W/swp.err" ||
  fail "validate -f <(...) (sweep): $(cat "$W/swp.err")"
grep -q 'valid TrainingSweep default/small-sweep' "$W/swp.out" || fail "sweep from a pipe: $(cat "$W/swp.out")"
# an error in a piped manifest still names its line
set +e; tiny | sed 's/^  replicas: 2$/  replicas: 0/' | "$RM_BIN/ringmaster" validate -f - 2>"$W/bad.err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q '^-:7: spec\.replicas: ' "$W/bad.err" || fail "bad job on stdin: exit $rc, $(cat "$W/bad.err")"
log "ok validate from a pipe and stdin (job and sweep)"

# run: the tiny job from a pipe, then from stdin
run_job pipe -f <(tiny) -o json
[ $RC -eq 0 ] || fail "run -f <(...): exit $RC"
[ "$(jget pipe 'j["status"]["phase"]')" = Succeeded ] || fail "run -f <(...): phase"
run_job stdin -f - -o json < <(tiny)
[ $RC -eq 0 ] || fail "run -f -: exit $RC"
[ "$(jget stdin 'j["status"]["phase"]')" = Succeeded ] || fail "run -f -: phase"
[ "$(jget stdin 'j["status"]["result"]["steps"]')" = 20 ] || fail "run -f -: steps $(jget stdin 'j["status"]["result"]["steps"]')"
assert_no_workers
log "ok run from a pipe and stdin"
