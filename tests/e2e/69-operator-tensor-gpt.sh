#!/usr/bin/env bash
# 69-operator-tensor-gpt: tensor parallelism for the transformer (docs/models-and-data.md, "Tensor
# parallelism") through the operator on kubesim with the real kubectl — a TrainingJob of a tiny GPT
# on builtin:tinyshakespeare with spec.parallelism.tensorParallel 2 and replicas 4 (T = 2 x D = 2)
# gets spec.parallelism in its pods through the launch contract (RINGMASTER_PARALLELISM), its
# workers place themselves by rank r = d*T + t into tensor and data-parallel groups, and the job
# Succeeds with a validation loss in status; a job whose heads T does not divide (2 heads, T = 4) is
# Failed with a condition naming spec.training.model.heads, and no pod is created for it.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

job() { # NAME HEADS T
  mkdir -p "$T/ckpt/default/$1"   # stands in for the shared volume a cluster would mount
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 4
  backend: ring
  runPolicy: {cleanPodPolicy: None}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 10}
  parallelism: {tensorParallel: $3}
  training:
    model: {type: gpt, layers: 2, heads: $2, embed: 32, context: 32, vocab: 256}
    data: {uri: "builtin:tinyshakespeare", format: text, validation: {fraction: 0.02}}
    optimizer: {type: adamw, lr: 0.01}
    batchSizePerWorker: 8
    epochs: 100
    maxSteps: 20
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
}
job tgpt 4 2 | k apply -f - >/dev/null
job odd 2 4 | k apply --validate=false -f - >/dev/null
wait_for 30 "4 pods created" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=tgpt --no-headers 2>/dev/null | grep -c .) -eq 4 ]"
k get pod tgpt-worker-3 -o json | $PY -c '
import json,sys
p=json.load(sys.stdin); env={e["name"]:e for e in p["spec"]["containers"][0]["env"]}
par=json.loads(env["RINGMASTER_PARALLELISM"]["value"])
assert par.get("tensorParallel")==2, par
' || fail "RINGMASTER_PARALLELISM in the pod"
wait_for 30 "odd job Failed" tj_phase_is odd Failed
msg=$(tj_field odd '{.status.conditions[?(@.type=="Failed")].message}')
echo "$msg" | grep -q "spec.training.model.heads: must be a multiple of spec.parallelism.tensorParallel (4)" ||
  fail "Failed condition does not name spec.training.model.heads: $msg"
[ "$(pod_count odd)" -eq 0 ] || fail "pods created for an invalid job"
wait_for 120 "tgpt Succeeded" tj_phase_is tgpt Succeeded
# the grid: the rank comes from the rendezvous, so look for rank 3's line (t = 1 of replica 1) on
# whichever pod holds it (the pods outlive the job: cleanPodPolicy None)
placed() {
  local i
  for i in 0 1 2 3; do
    # (to a file first: `kubectl | grep -q` under pipefail fails when grep exits early)
    kubectl logs "tgpt-worker-$i" > "$T/w.log" 2>/dev/null || continue
    grep -q 'msg="tensor round" rank=3 world=4 t=1 T=2 p=0 P=1 d=1 D=2 tensor_comm=' "$T/w.log" && return 0
  done
  return 1
}
placed || fail "no worker placed as tensor rank 1 of replica 1"
vl=$(tj_field tgpt '{.status.result.valLoss}')
log "valLoss=$vl restarts=$(tj_field tgpt '{.status.restarts}')"
$PY -c "import sys; v=float('$vl'); sys.exit(0 if 0 < v < 5.545 else 1)" || fail "valLoss $vl (ln 256 = 5.545)"
k delete tj tgpt odd --timeout=30s >/dev/null
log "PASS"
