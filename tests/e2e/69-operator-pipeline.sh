#!/usr/bin/env bash
# 69-operator-pipeline: pipeline stages (docs/strategies.md#pipeline-stages) through the operator on
# kubesim with the real kubectl — a 2x2 TrainingJob (spec.parallelism: 2 stages x 2 data-parallel
# replicas, 4 micro-batches) gets spec.parallelism in its pods through the launch contract
# (RINGMASTER_PARALLELISM), its workers place themselves by rank r = d*P + p and the job Succeeds
# with its accuracy in status; a job whose replicas the stages do not divide is Failed with a
# condition naming spec.replicas.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
# KEEP_PODS: the 2-epoch job can Succeed in 4 s on an idle machine, before its logs are read below
KEEP_PODS=1 fast_job pipe 4 2 | sed 's/^  backend: ring$/  backend: ring\n  parallelism: {pipelineStages: 2, microBatches: 4, schedule: 1f1b}/' > "$T/pipe.yaml"
grep -q 'pipelineStages: 2' "$T/pipe.yaml" || fail "fixture edit"
k apply -f "$T/pipe.yaml" >/dev/null
fast_job odd 3 1 | sed 's/^  backend: ring$/  backend: ring\n  parallelism: {pipelineStages: 2}/' |
  k apply --validate=false -f - >/dev/null
wait_for 30 "4 pods created" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=pipe --no-headers 2>/dev/null | grep -c .) -eq 4 ]"
k get pod pipe-worker-3 -o json | $PY -c '
import json,sys
p=json.load(sys.stdin); env={e["name"]:e for e in p["spec"]["containers"][0]["env"]}
par=json.loads(env["RINGMASTER_PARALLELISM"]["value"])
assert par=={"pipelineStages":2,"microBatches":4,"schedule":"1f1b"}, par
' || fail "RINGMASTER_PARALLELISM in the pod"
wait_for 30 "odd job Failed" tj_phase_is odd Failed
msg=$(tj_field odd '{.status.conditions[?(@.type=="Failed")].message}')
echo "$msg" | grep -q "spec.replicas: must be a multiple of spec.parallelism.pipelineStages" ||
  fail "Failed condition does not name spec.replicas: $msg"
[ "$(pod_count odd)" -eq 0 ] || fail "pods created for an invalid job"
# the grid: rank r = d*P + p (worker 3 is stage 1 of replica 1), the layout printed at start (the
# pods outlive the job: KEEP_PODS above); the rank comes from the rendezvous, so look
# for the line on whichever pod is rank 3
placed() {
  local i
  for i in 0 1 2 3; do
    # (to a file first: `kubectl | grep -q` under pipefail fails when grep exits early)
    kubectl logs "pipe-worker-$i" > "$T/w.log" 2>/dev/null || continue
    grep -q 'msg="pipeline" stages=2 micro_batches=4 schedule=1f1b stage=1 replica=1 of 2 in_flight=1 layout=.*rank=3' "$T/w.log" && return 0
  done
  return 1
}
wait_for 120 "rank 3 placed as stage 1 of replica 1" placed
wait_for 240 "pipe Succeeded" tj_phase_is pipe Succeeded
acc=$(tj_field pipe '{.status.result.testAccuracy}')
log "accuracy=$acc restarts=$(tj_field pipe '{.status.restarts}')"
$PY -c "import sys; a=float('$acc'); sys.exit(0 if 0.8 < a <= 1 else 1)" || fail "accuracy $acc"
k delete tj pipe odd --timeout=30s >/dev/null
log "PASS"
