#!/usr/bin/env bash
# A bench-mode TrainingJob: the workers rendezvous, run the allreduce sweep, and the runner prints
# rank 0's nccl-tests-style table with zero #wrong; the job Succeeds. Both workers are on this
# host, so it measures shared memory, the transport training would use here, and its header says so.
source "$(dirname "$0")/5x-run-lib.bash"
run_job b -f "$FIX/bench-small.yaml"
[ $RC -eq 0 ] || fail "exit $RC"
grep -q "busbw" "$W/b.out" || fail "no table header"
grep -q "backend shm, 2 ranks" "$W/b.out" || fail "the table does not measure shm: $(grep -m1 '# ringmaster-worker bench' "$W/b.out")"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum' "$W/b.out" || true)
[ "$rows" -ge 5 ] || fail "$rows table rows"
grep -q "Out of bounds values : 0 OK" "$W/b.out" || fail "#wrong not zero"
grep -q "^Succeeded" "$W/b.out" || fail "no Succeeded line"
assert_no_workers
log "PASS ($rows sizes)"
