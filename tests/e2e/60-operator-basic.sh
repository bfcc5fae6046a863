#!/usr/bin/env bash
# 60-operator-basic: the operator on kubesim with the real kubectl. CRD applied and established; a
# 2-worker TrainingJob gets its Secret, headless Service and pods (owner references, labels, env);
# the workers (real processes via kubesim's kubelet) rendezvous with the operator and train; the
# job Succeeds with its accuracy (and its checkpoints follow spec.checkpoint) in status and in `kubectl get tj`; events are recorded; an invalid
# job gets a Failed condition naming the field while the good one runs; `kubectl delete tj`
# removes the pods; metrics and probes answer.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
curl -fsS "http://127.0.0.1:$OP_PROBE_a/healthz" >/dev/null || fail "healthz"

# the pods outlive the 1-epoch job so their shape can be read on a slow machine (KEEP_PODS). The
# template's copies of contract variables (topology ones this allreduce job leaves unset among them)
# must not reach the pods: the job still trains as 2 allreduce workers, with an EnvOverridden Warning
KEEP_PODS=1 fast_job mnist 2 1 "        env: [{name: RINGMASTER_STRATEGY, value: parameterServer}, {name: RINGMASTER_PS_ADDRS, value: 'nowhere:1'}, {name: RINGMASTER_PARALLELISM, value: '{\"pipelineStages\": 2}'}, {name: MINE, value: kept}]" |
  k apply -f - >/dev/null
# invalid: minReplicas > replicas (the operator checks it even if the API server does no CEL)
cat <<YAML | k apply --validate=false -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: broken}
spec: {replicas: 2, minReplicas: 3, maxReplicas: 4, template: {spec: {containers: [{name: worker, image: ringmaster/worker:latest}]}}}
YAML
wait_for 20 "2 pods created" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=mnist --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
# the job trains for seconds and its pods are cleaned up when it Succeeds: read the pod at once
pod=$(k get pod mnist-worker-1 -o json)
k get secret mnist-rendezvous >/dev/null || fail "no rendezvous Secret"
[ "$(k get svc mnist -o jsonpath='{.spec.clusterIP}')" = "None" ] || fail "service not headless"
[ "$(k get svc mnist -o jsonpath='{.spec.publishNotReadyAddresses}')" = "true" ] || fail "publishNotReadyAddresses"
echo "$pod" | $PY -c '
import json,sys
p=json.load(sys.stdin); md=p["metadata"]; sp=p["spec"]
o=md["ownerReferences"][0]
assert o["kind"]=="TrainingJob" and o["name"]=="mnist" and o["controller"] and o["blockOwnerDeletion"], o
l=md["labels"]; assert l["ringmaster.dev/job-name"]=="mnist" and l["ringmaster.dev/replica-index"]=="1" and "ringmaster.dev/epoch" in l, l
c=sp["containers"][0]; env={e["name"]:e for e in c["env"]}
for k,v in {"RANK":"1","WORLD_SIZE":"2","LOCAL_RANK":"0","LOCAL_WORLD_SIZE":"1","RINGMASTER_CHECKPOINT_INTERVAL":"50","RINGMASTER_ROLE":"worker","MASTER_PORT":"29500","PET_NNODES":"2","PET_NODE_RANK":"1","RINGMASTER_WORKER_ID":"1","RINGMASTER_JOB":"default/mnist","MASTER_ADDR":"mnist-worker-0.mnist"}.items():
    assert env[k]["value"]==v, (k, env[k])
assert env["RINGMASTER_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]=="mnist-rendezvous"
assert env["RINGMASTER_BIND_ADDR"]["valueFrom"]["fieldRef"]["fieldPath"]=="status.podIP"
assert json.loads(env["RINGMASTER_TRAINING"]["value"])["model"]["hidden"]==[128]
assert c["args"][0]=="train" and sp["restartPolicy"]=="Never" and sp["subdomain"]=="mnist"
for k in ("RINGMASTER_STRATEGY","RINGMASTER_PS_ADDRS","RINGMASTER_PARALLELISM"):
    assert k not in env, (k, env[k])
assert env["MINE"]["value"]=="kept", env.get("MINE")
' || fail "worker pod shape"
log "pods ok; waiting for training"
wait_for 30 "broken job Failed" tj_phase_is broken Failed
msg=$(tj_field broken '{.status.conditions[?(@.type=="Failed")].message}')
echo "$msg" | grep -q "spec.minReplicas" || fail "Failed condition does not name the field: $msg"
[ "$(tj_field broken '{.status.conditions[?(@.type=="Failed")].reason}')" = "InvalidSpec" ] || fail "reason"
[ "$(pod_count broken)" -eq 0 ] || fail "pods created for an invalid job"
wait_for 150 "mnist Succeeded" tj_phase_is mnist Succeeded
acc=$(tj_field mnist '{.status.result.testAccuracy}')
log "accuracy=$acc"
$PY -c "import sys; a=float('$acc'); sys.exit(0 if 0.7 < a <= 1 else 1)" || fail "accuracy $acc"
# spec.checkpoint reaches the pods: intervalSteps 50 (not the worker's default 200), keep 3
ls "$T/ckpt/default/mnist" >"$T/ckpts.txt" 2>/dev/null || true
$PY - "$T/ckpts.txt" <<'PY' || fail "checkpoints do not follow spec.checkpoint.intervalSteps: 50: $(tr '\n' ' ' <"$T/ckpts.txt")"
import re,sys
steps=[int(m.group(1)) for m in (re.match(r"ckpt-(\d{12})(-\d+)?\.rmck$",l.strip()) for l in open(sys.argv[1])) if m]
assert steps, "no checkpoint in the pods' folder"
# 1 epoch of 60000/(2*64) = 468 steps; the end of training writes one at 468 whatever the interval
assert all(s % 50 == 0 for s in steps if s != 468), steps
assert 450 in steps, steps              # the default interval (200) would give 200, 400, 468
assert len(set(steps)) <= 3, steps      # keep: 3
PY
log "checkpoints: $(tr '\n' ' ' <"$T/ckpts.txt")"
k get tj mnist | tee "$T/get.txt"
grep -q Succeeded "$T/get.txt" || fail "kubectl get tj does not show Succeeded"
[ "$(tj_field mnist '{.status.observedGeneration}')" = "$(tj_field mnist '{.metadata.generation}')" ] || fail "observedGeneration"
# status writes never touch metadata: kubectl's last-applied annotation survives (apply keeps working)
k get tj mnist -o jsonpath='{.metadata.annotations}' | grep -q last-applied-configuration || fail "last-applied annotation lost"
k get events -o json | $PY -c '
import json,sys
ev=json.load(sys.stdin)["items"]
r=[(e.get("reason"),e.get("involvedObject",e.get("regarding",{})).get("name")) for e in ev]
assert any(x[0]=="SuccessfulCreatePod" for x in r), r
assert any(x[0]=="Succeeded" or "Succeeded" in (x[0] or "") for x in r), r
assert any(x[0]=="InvalidSpec" and x[1]=="broken" for x in r), r
w=[e for e in ev if e.get("reason")=="EnvOverridden"]
assert w and w[0].get("type")=="Warning", w
m=w[0].get("message",w[0].get("note",""))
assert all(k in m for k in ("RINGMASTER_STRATEGY","RINGMASTER_PS_ADDRS","RINGMASTER_PARALLELISM")), m
' || fail "events"
[ "$(metric "$OP_METRICS_a" '^ringmaster_jobs_successful_total')" -ge 1 ] || fail "metric successful"
[ "$(metric "$OP_METRICS_a" '^ringmaster_is_leader')" -eq 1 ] || fail "metric is_leader"
k delete tj mnist --wait=true --timeout=30s >/dev/null
wait_for 30 "pods removed" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=mnist --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
log "PASS"
