#!/usr/bin/env bash
# README "Failure semantics" row F2.
# A hung worker (RINGMASTER_FAULT=hang) stops making progress: the progress deadline names it,
# the group restarts (ProgressDeadlineExceeded), the hung process is stopped and replaced, and
# the job Succeeds.
source "$(dirname "$0")/5x-run-lib.bash"
RINGMASTER_FAULT="hang:rank=1:step=200" run_job hang -f "$FIX/hang.yaml" -o json
[ $RC -eq 0 ] || fail "exit $RC"
[ "$(jget hang 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
r=$(jget hang 'j["status"]["restarts"]')
[ "$r" -ge 1 ] || fail "restarts $r"
grep -q 'reason=ProgressDeadlineExceeded' "$W/hang.err" || fail "no ProgressDeadlineExceeded event"
grep -q 'why=progress-deadline' "$W/hang.err" || fail "the hung worker was not stopped"
assert_no_workers
log "PASS restarts=$r $(grep -o 'message=\"[^\"]*ProgressDeadline[^\"]*\|worker [0-9] has not joined[^\"]*\|made no progress[^\"]*' "$W/hang.err" | head -1)"
