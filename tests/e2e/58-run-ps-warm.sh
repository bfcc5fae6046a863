#!/usr/bin/env bash
# e2e-timeout: 900
# Asynchronous parameter servers with a warm start (spec.parameterServer.warmStartSteps, Dean et
# al.'s Downpour warm start; ps_core.h) through `ringmaster run`: 3 workers, stalenessBound 4,
# warmStartSteps 40. The first 40 updates are worker 0's alone (server 0 counts every other
# worker's push before version 40: none), the others join at version 40 (server 0's "warm start
# done" line) and then train (their own progress in their logs, after that line), worker 0 is not
# held by the staleness bound while the others wait (it reaches version 40 without a 10 s
# stand-still: the bound of 4 would otherwise park it at step 5 until the waiting workers count as
# dead), and the job Succeeds having drawn its whole budget. A warmStartSteps with mode: sync is
# refused by `ringmaster validate` and `ringmaster run` with a field-named error, nothing started.
source "$(dirname "$0")/5x-run-lib.bash"
cat > "$W/warm.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: warm}
spec:
  replicas: 3
  strategy: parameterServer
  parameterServer: {replicas: 1, mode: async, stalenessBound: 4, warmStartSteps: 40}
  restartPolicy: {maxRestarts: 2, progressDeadlineSeconds: 300}
  checkpoint: {intervalSteps: 100000}
  training:
    model: {type: mlp, hidden: [64]}
    epochs: 1
    batchSizePerWorker: 64
    optimizer: {type: adagrad, lr: 0.01}
    warmupEpochs: 0
YAML
run_job warm -f "$W/warm.yaml" -o json
[ $RC -eq 0 ] || fail "exit $RC"
[ "$(jget warm 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
line=$(grep 'warm start done' "$W/run-warm/ps-0.log" || true)
[ -n "$line" ] || fail "server 0 never released the other workers"
ver=$(sed -n 's/.* version=\([0-9]*\).*/\1/p' <<<"$line")
others=$(sed -n 's/.*others_pushes_during_warm_start=\([0-9]*\).*/\1/p' <<<"$line")
[ "$ver" -ge 40 ] || fail "the others joined at version $ver < 40"
[ "$others" = 0 ] || fail "$others pushes by other workers during the warm start"
t_done=$(sed -n 's/^ts=\([^ ]*\) .*/\1/p' <<<"$line")
# worker 0 found the server (its training starts) and reached version 40 without waiting on the bound
t_w0=$(grep -m1 'msg="parameter server 0 is at' "$W/run-warm/worker-0.log" | sed -n 's/^ts=\([^ ]*\) .*/\1/p')
[ -n "$t_w0" ] || fail "worker 0 never found server 0"
secs() { $PY -c "import datetime,sys; f=lambda s: datetime.datetime.strptime(s,'%Y-%m-%dT%H:%M:%S.%fZ').timestamp(); print(f(sys.argv[2]) - f(sys.argv[1]))" "$1" "$2"; }
# every other worker trained after the release: a step past 0 in its log, logged after t_done
for w in 1 2; do
  first=$(grep -m1 'msg="progress"' "$W/run-warm/worker-$w.log" | sed -n 's/^ts=\([^ ]*\) .*/\1/p')
  [ -n "$first" ] || fail "worker $w never trained (no progress line)"
  dt=$(secs "$t_done" "$first")
  $PY -c "import sys; sys.exit(0 if $dt >= 0 else 1)" || fail "worker $w progressed before the release"
done
steps=$(jget warm 'j["status"]["result"]["steps"]')
[ "$steps" -ge 900 ] || fail "the job drew $steps batches, not its 1-epoch budget"
warm_s=$(secs "$t_w0" "$t_done")
log "warm start: released at version $ver, ${warm_s} s after worker 0 found the server; others' pushes during it: $others"
# the bound holding worker 0 at step 5 for the 10 s that the waiting workers need to count as
# dead would show as a warm start of about 10 s for 40 steps of an MLP [64] (0.25 s for 150 steps here;
# 0.8 s for 200 steps of an MLP [128] at a 0.4-CPU cap and load average 70)
$PY -c "import sys; sys.exit(0 if $warm_s < 8 else 1)" ||
  fail "the warm start took ${warm_s} s: worker 0 waited on the staleness bound?"

# a warm start in sync mode: refused, nothing started
sed 's/mode: async, stalenessBound: 4, warmStartSteps: 40/mode: sync, warmStartSteps: 40/' \
  "$W/warm.yaml" > "$W/bad.yaml"
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad.yaml" >"$W/v.out" 2>"$W/v.err"; vrc=$?; set -e
[ $vrc -ne 0 ] || fail "validate accepted warmStartSteps with mode: sync"
grep -q 'spec.parameterServer.warmStartSteps' "$W/v.err" "$W/v.out" || fail "validate: no field name"
run_job bad -f "$W/bad.yaml" -o json
[ $RC -ne 0 ] || fail "run accepted warmStartSteps with mode: sync"
grep -q 'spec.parameterServer.warmStartSteps' "$W/bad.err" "$W/bad.out" || fail "run: no field name"
[ ! -e "$W/run-bad/worker-0.log" ] || fail "run started workers for an invalid spec"
assert_no_workers
log "PASS warm start: others joined at version $ver, $others pushes by them before; steps=$steps"
