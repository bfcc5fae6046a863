#!/usr/bin/env bash
# 69-operator-kueue: the self-managed Workload protocol (docs/gang-kueue.md §4(b)) as a
# contract test: Kueue itself is not simulated, the test plays Kueue by writing the Workload's
# status with kubectl (Workload and ResourceFlavor CRDs: the real schemas, fixtures/crds/).
#  - a job labelled kueue.x-k8s.io/queue-name is suspended at once, gets its Workload (one pod set
#    "worker", count, queue, owner) and no pod until admitted;
#  - admitted (status.admission with flavor "fast" + QuotaReserved/Admitted): it runs with the
#    flavor's node labels as nodeSelector, on the matching node only; PodsReady=True once all ready;
#  - Evicted: suspended, pods gone, checkpoints kept, the injected nodeSelector restored, the
#    admission cleared (QuotaReserved=False, Requeued=True);
#  - re-admitted: it resumes from its checkpoint; resized (kubectl scale) while admitted, it is
#    suspended and its Workload replaced by one for the new count; admitted again it Succeeds on
#    that count; the Workload ends Finished.
source "$(dirname "$0")/6x-operator-lib.bash"
FIX="$RM_ROOT/tests/e2e/fixtures/crds"
RDZV_PORT=$(free_port)
start_kubesim --node kq-fast:cpu=4,memory=8Gi --node kq-slow:cpu=4,memory=8Gi
install_crd
k create -f "$FIX/kueue.x-k8s.io_workloads.yaml" -f "$FIX/kueue.x-k8s.io_resourceflavors.yaml" >/dev/null
k wait --for condition=established --timeout=20s crd/workloads.kueue.x-k8s.io crd/resourceflavors.kueue.x-k8s.io >/dev/null
k label node kq-fast pool=fast >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: fast}
spec:
  nodeLabels: {pool: fast}
YAML
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

mkdir -p "$T/ckpt/default/kq"
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata:
  name: kq
  labels: {kueue.x-k8s.io/queue-name: team-q}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 20}
  training:
    mode: train
    model: {type: mlp, hidden: [512]}
    epochs: 3
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
        resources:
          requests: {cpu: "1"}
YAML
wl_name() { k get workloads.kueue.x-k8s.io -l ringmaster.dev/job-name=kq -o jsonpath='{.items[0].metadata.name}' 2>/dev/null; }
wait_for 30 "Workload created" bash -c "[ -n \"\$(kubectl get workloads.kueue.x-k8s.io -l ringmaster.dev/job-name=kq -o name 2>/dev/null)\" ]"
WL=$(wl_name)
wait_for 20 "job suspended" bash -c "[ \"\$(kubectl get tj kq -o jsonpath='{.spec.runPolicy.suspend}')\" = true ]"
k get workloads.kueue.x-k8s.io "$WL" -o json | $PY -c '
import json,sys
w=json.load(sys.stdin); sp=w["spec"]; md=w["metadata"]
assert sp["queueName"]=="team-q", sp
ps=sp["podSets"]; assert len(ps)==1 and ps[0]["name"]=="worker" and ps[0]["count"]==2 and "minCount" not in ps[0], ps
assert ps[0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]=="1"
o=md["ownerReferences"][0]; assert o["kind"]=="TrainingJob" and o["name"]=="kq" and o["controller"], o
assert md["labels"]["kueue.x-k8s.io/job-uid"], md
assert md["name"].startswith("trainingjob-kq-"), md["name"]
' || fail "Workload spec"
sleep 5
[ "$(pod_count kq)" = 0 ] || fail "pods exist before admission"
wait_for 20 "phase Suspended" tj_phase_is kq Suspended
# why it waits, in one condition (rule R12)
wait_for 20 "Blocked QueuedByKueue" bash -c "[ \"\$(kubectl get tj kq -o jsonpath='{.status.conditions[?(@.type==\"Blocked\")].reason}')\" = QueuedByKueue ]"
bm=$(tj_field kq '{.status.conditions[?(@.type=="Blocked")].message}')
grep -q "Workload $WL in queue .* is not admitted" <<<"$bm" || fail "Blocked message: $bm"
log "suspended, Workload $WL, no pods before admission; Blocked: $bm"

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
cond() { echo "{\"type\":\"$1\",\"status\":\"$2\",\"reason\":\"$3\",\"message\":\"set by the test (playing Kueue)\",\"lastTransitionTime\":\"$(now)\"}"; }
ADMISSION='{"clusterQueue":"cq","podSetAssignments":[{"name":"worker","count":2,"flavors":{"cpu":"fast"},"resourceUsage":{"cpu":"2"}}]}'
admit() {
  k patch workloads.kueue.x-k8s.io "$WL" --subresource=status --type merge -p \
    "{\"status\":{\"admission\":$ADMISSION,\"conditions\":[$(cond QuotaReserved True QuotaReserved),$(cond Admitted True Admitted),$(cond Evicted False QuotaReserved)]}}" >/dev/null
}
admit
wait_for 30 "2 pods after admission" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=kq --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
k get pods -l ringmaster.dev/job-name=kq -o json | $PY -c '
import json,sys
for p in json.load(sys.stdin)["items"]:
    assert p["spec"].get("nodeSelector")=={"pool":"fast"}, p["spec"].get("nodeSelector")
' || fail "admitted pods lack the flavor nodeSelector"
wait_for 30 "pods bound to kq-fast" bash -c "[ \"\$(kubectl get pods -l ringmaster.dev/job-name=kq -o jsonpath='{.items[*].spec.nodeName}')\" = 'kq-fast kq-fast' ]"
[ "$(k get tj kq -o jsonpath='{.spec.runPolicy.suspend}')" = false ] || fail "job not unsuspended"
wl_cond() { k get workloads.kueue.x-k8s.io "$WL" -o jsonpath="{.status.conditions[?(@.type==\"$1\")].status}"; }
wait_for 60 "Workload PodsReady=True" bash -c "[ \"\$(kubectl get workloads.kueue.x-k8s.io $WL -o jsonpath='{.status.conditions[?(@.type==\"PodsReady\")].status}')\" = True ]"
wait_for 120 "a checkpoint" bash -c "[ \"\$(kubectl get tj kq -o jsonpath='{.status.progress.lastCheckpointStep}')\" -ge 40 ] 2>/dev/null"
ck=$(tj_field kq '{.status.progress.lastCheckpointStep}')
log "admitted: running on kq-fast with nodeSelector pool=fast, checkpoint at step $ck"

# Kueue evicts it (preempted)
k patch workloads.kueue.x-k8s.io "$WL" --subresource=status --type merge -p \
  "{\"status\":{\"conditions\":[$(cond QuotaReserved True QuotaReserved),$(cond Admitted True Admitted),$(cond PodsReady True PodsReady),$(cond Evicted True Preempted)]}}" >/dev/null
wait_for 30 "job suspended by eviction" bash -c "[ \"\$(kubectl get tj kq -o jsonpath='{.spec.runPolicy.suspend}')\" = true ]"
wait_for 60 "pods gone" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=kq --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
[ -z "$(k get tj kq -o jsonpath='{.spec.template.spec.nodeSelector}')" ] || fail "nodeSelector not restored: $(k get tj kq -o jsonpath='{.spec.template.spec.nodeSelector}')"
wait_for 30 "admission cleared" bash -c "[ -z \"\$(kubectl get workloads.kueue.x-k8s.io $WL -o jsonpath='{.status.admission}')\" ]"
k get workloads.kueue.x-k8s.io "$WL" -o json | $PY -c '
import json,sys
c={x["type"]:x for x in json.load(sys.stdin)["status"]["conditions"]}
assert c["QuotaReserved"]["status"]=="False" and c["Requeued"]["status"]=="True" and c["Admitted"]["status"]=="False", c
' || fail "Workload conditions after eviction"
ls "$T/ckpt/default/kq" | grep -q . || fail "checkpoints removed on eviction"
wait_for 20 "phase Suspended" tj_phase_is kq Suspended
[ "$(wl_cond PodsReady)" = False ] || fail "PodsReady is '$(wl_cond PodsReady)' after the eviction, not False"
sleep 3
[ "$(pod_count kq)" = 0 ] || fail "pods came back while evicted"
log "evicted: suspended, pods gone, admission cleared, checkpoints kept ($(ls "$T/ckpt/default/kq" | wc -l) files)"

# re-admitted: resumes from the checkpoint
admit
wait_for 30 "2 pods after re-admission" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=kq --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
# resized while admitted (the pod sets no longer match the Workload): suspended, the Workload is
# replaced by one asking for the new count, which the test admits; the job finishes on 1 worker
olduid=$(k get workloads.kueue.x-k8s.io "$WL" -o jsonpath='{.metadata.uid}')
k scale tj kq --replicas=1 >/dev/null
wait_for 30 "Workload replaced" bash -c "u=\$(kubectl get workloads.kueue.x-k8s.io $WL -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $olduid ]"
[ "$(k get workloads.kueue.x-k8s.io "$WL" -o jsonpath='{.spec.podSets[0].count}')" = 1 ] || fail "new Workload count"
[ "$(k get tj kq -o jsonpath='{.spec.runPolicy.suspend}')" = true ] || fail "resized job not suspended"
wait_for 60 "pods gone after resize" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=kq --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
log "resized to 1: suspended, Workload replaced (count 1)"
ADMISSION='{"clusterQueue":"cq","podSetAssignments":[{"name":"worker","count":1,"flavors":{"cpu":"fast"},"resourceUsage":{"cpu":"1"}}]}'
admit
wait_for 240 "job Succeeded" tj_phase_is kq Succeeded
d=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)
grep -h "checkpoint loaded" "$d"/logs/*/*.log >"$T/resume.txt" 2>/dev/null || true
[ -s "$T/resume.txt" ] || fail "no worker resumed from a checkpoint"
step=$(grep -o 'step=[0-9]*' "$T/resume.txt" | head -1 | cut -d= -f2)
[ "$step" -ge "$ck" ] || fail "resumed from step $step, before the checkpoint at $ck"
wait_for 30 "Workload Finished" bash -c "kubectl get workloads.kueue.x-k8s.io $WL -o jsonpath='{.status.conditions[?(@.type==\"Finished\")].status}' | grep -qx True"
[ "$(k get workloads.kueue.x-k8s.io "$WL" -o jsonpath='{.status.conditions[?(@.type=="Finished")].reason}')" = Succeeded ] || fail "Finished reason"
log "re-admitted: resumed from step $step, Succeeded, Workload Finished"
curl -fsS "$KS_URL/kubesim/requests" >"$T/requests.json"
# trainingjobs create is the sweep controller's (trials; e2e 69-operator-sweep checks it), not Kueue's
$PY "$RM_ROOT/tests/e2e/fixtures/rbac_check.py" "$RM_ROOT/deploy/20-rbac.yaml" "$T/requests.json" \
  workloads,workloads/status,resourceflavors,trainingjobs ringmaster.dev:trainingjobs:delete ringmaster.dev:trainingjobs:get \
  ringmaster.dev:trainingjobs:create ||
  fail "the operator's Kueue requests do not match deploy/20-rbac.yaml"
echo "PASS 69-operator-kueue"
