#!/usr/bin/env bash
# maxRestarts 1 and two worker deaths: the second failure exhausts the budget, the job ends Failed
# with reason BackoffLimitExceeded and a message that says so, exit 1, and no process is left.
source "$(dirname "$0")/5x-run-lib.bash"
RINGMASTER_FAULT="exit:rank=1:step=100;exit:rank=0:step=300" run_job budget -f "$FIX/budget.yaml" -o json
[ $RC -eq 1 ] || fail "exit $RC, want 1"
[ "$(jget budget 'j["status"]["phase"]')" = Failed ] || fail "phase"
[ "$(jget budget 'j["status"]["restarts"]')" = 1 ] || fail "restarts"
reason=$(jget budget '[c["reason"] for c in j["status"]["conditions"] if c["type"]=="Failed"][0]')
[ "$reason" = BackoffLimitExceeded ] || fail "reason $reason"
jget budget '[c["message"] for c in j["status"]["conditions"] if c["type"]=="Failed"][0]' |
  grep -q "reached the specified restart limit (1)" || fail "message"
grep -q "failed: BackoffLimitExceeded" "$W/budget.err" || fail "reason not printed"
assert_no_workers
log "PASS"
