#!/usr/bin/env bash
# e2e-timeout: 1200
# Hierarchical allreduce under `ringmaster run` (docs/strategies.md#topology): RINGMASTER_RUN_NODES=2
# fakes 2 nodes x 2 ranks on this host; spec.training.allreduce auto then picks the hierarchical comm
# (shm inside each fake node, a TCP ring per local index between them). The job Succeeds with the
# accuracy of the flat ring (within 0.5 points: only the summation order differs), and survives a worker
# killed on either node (RINGMASTER_FAULT on rank 1 = node 0 and rank 2 = node 1); ZeRO-3 sharding
# over it trains to the same accuracy; a bad RINGMASTER_RUN_NODES stops the run with its name.
source "$(dirname "$0")/5x-run-lib.bash"
# 4 workers loading the data set at once on a shared 2-core machine can take longer than the
# fixture's 20 s progress deadline before the first round: this test counts restarts exactly
sed -e 's/^  replicas: 2$/  replicas: 4/' -e 's/^    progressDeadlineSeconds: 20$/    progressDeadlineSeconds: 120/' \
  "$FIX/small.yaml" > "$W/small4.yaml"
grep -q '^  replicas: 4$' "$W/small4.yaml" || fail "fixture edit"
grep -q '^    progressDeadlineSeconds: 120$' "$W/small4.yaml" || fail "fixture edit (deadline)"
sed 's/^    mode: train$/    mode: train\n    allreduce: ring/' "$W/small4.yaml" > "$W/ring4.yaml"
grep -q '^    allreduce: ring$' "$W/ring4.yaml" || fail "fixture edit (allreduce)"
"$RM_BIN/ringmaster" validate -f "$W/ring4.yaml" >/dev/null || fail "validate ring4.yaml"

# flat: the same fake nodes, spec.training.allreduce: ring
RINGMASTER_RUN_NODES=2 run_job flat -f "$W/ring4.yaml" -o json
[ $RC -eq 0 ] || fail "flat run exit $RC: $(tail -5 "$W/flat.err")"
acc0=$(jget flat 'j["status"]["result"]["testAccuracy"]')
grep -q 'allreduce="shm"' "$W"/run-flat/worker-0.log || fail "flat run did not run the flat shm comm: $(grep topology "$W"/run-flat/worker-0.log)"

# hierarchical: auto with 2 nodes x 2 ranks
RINGMASTER_RUN_NODES=2 run_job hier -f "$W/small4.yaml" -o json
[ $RC -eq 0 ] || fail "hier run exit $RC: $(tail -5 "$W/hier.err")"
[ "$(jget hier 'j["status"]["phase"]')" = Succeeded ] || fail "hier phase"
acc1=$(jget hier 'j["status"]["result"]["testAccuracy"]')
for i in 0 1 2 3; do
  grep -q 'msg="topology" nodes=2 node=[^ ]*-n[01] local_rank=[01] local_world_size=2 allreduce="hierarchical 2 nodes x 2 ranks (intra shm, inter ring)"' \
    "$W/run-hier/worker-$i.log" || fail "worker $i did not run hierarchically: $(grep -h 'topology\|round ready' "$W/run-hier/worker-$i.log")"
done
grep -q 'node=[^ ]*-n1 local_rank=1 ' "$W/run-hier/worker-3.log" || fail "worker 3 is not local rank 1 of node 1"
$PY -c "import sys; sys.exit(0 if abs($acc1-$acc0) <= 0.005 else 1)" || fail "hier accuracy $acc1 vs flat $acc0 (> 0.5 points)"

# a worker killed on each node
RINGMASTER_RUN_NODES=2 RINGMASTER_FAULT="exit:rank=1:step=150;exit:rank=2:step=300" \
  run_job fault -f "$W/small4.yaml" -o json
[ $RC -eq 0 ] || fail "faulted run exit $RC: $(tail -5 "$W/fault.err")"
[ "$(jget fault 'j["status"]["phase"]')" = Succeeded ] || fail "faulted phase"
[ "$(jget fault 'j["status"]["restarts"]')" = 2 ] || fail "restarts $(jget fault 'j["status"]["restarts"]') != 2"
acc2=$(jget fault 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if abs($acc2-$acc1) <= 0.005 else 1)" || fail "faulted accuracy $acc2 vs clean $acc1"
# every round of the faulted run (3 formations) ran hierarchically on every worker that joined it
n=$(cat "$W"/run-fault/worker-*.log | grep -c 'allreduce="hierarchical 2 nodes x 2 ranks' || true)
[ "$n" -ge 12 ] || fail "$n hierarchical formations in the faulted run, want >= 12"

# ZeRO-3 over the hierarchical comm (its reduce-scatter / all-gather are the hierarchical allreduce
# plus a copy): same accuracy
sed 's/^    mode: train$/    mode: train\n    sharding: full/' "$W/small4.yaml" > "$W/full4.yaml"
grep -q '^    sharding: full$' "$W/full4.yaml" || fail "fixture edit (sharding)"
RINGMASTER_RUN_NODES=2 run_job full -f "$W/full4.yaml" -o json
[ $RC -eq 0 ] || fail "sharded hier run exit $RC: $(tail -5 "$W/full.err")"
acc3=$(jget full 'j["status"]["result"]["testAccuracy"]')
grep -q 'allreduce="hierarchical 2 nodes x 2 ranks' "$W/run-full/worker-0.log" || fail "sharded run was not hierarchical"
$PY -c "import sys; sys.exit(0 if abs($acc3-$acc0) <= 0.005 else 1)" || fail "sharded hier accuracy $acc3 vs flat $acc0"

# a bad RINGMASTER_RUN_NODES is refused by name
RINGMASTER_RUN_NODES=9 run_job badnodes -f "$W/small4.yaml" -o json
[ $RC -ne 0 ] || fail "RINGMASTER_RUN_NODES=9 with 4 replicas was accepted"
grep -q RINGMASTER_RUN_NODES "$W/badnodes.err" || fail "the error does not name RINGMASTER_RUN_NODES: $(tail -3 "$W/badnodes.err")"
assert_no_workers
log "PASS flat=$acc0 hier=$acc1 faulted=$acc2 sharded-full=$acc3"
