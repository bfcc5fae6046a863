#!/usr/bin/env bash
# 66-operator-policies: runPolicy on kubesim — suspend (no pods, phase Suspended) then resume
# (pods created, job Succeeds); ttlSecondsAfterFinished (the finished job is deleted, its pods go
# with it); an invalid update of a running job keeps it running (InvalidSpec); managedBy another controller (the operator leaves the job alone: no status, no pods).
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a --namespace default --namespace kube-public
# suspend → resume
fast_job paused 1 1 | sed 's/^  replicas: 1$/  replicas: 1\n  runPolicy: {suspend: true}/' | k apply -f - >/dev/null
wait_for 20 "Suspended" tj_phase_is paused Suspended
sleep 1
[ "$(pod_count paused)" -eq 0 ] || fail "pods exist for a suspended job"
k patch tj paused --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
wait_for 20 "pod after resume" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=paused --no-headers 2>/dev/null | grep -c .) -eq 1 ]"
wait_for 120 "resumed job Succeeded" tj_phase_is paused Succeeded
# ttlSecondsAfterFinished
fast_job shortlived 1 1 | sed 's/^  replicas: 1$/  replicas: 1\n  runPolicy: {ttlSecondsAfterFinished: 2}/' | k apply -f - >/dev/null
# (with ttl 2 s the Succeeded phase can be gone before a loaded machine's poll sees it: the
# operator's own log line says it was deleted because it had finished)
ttl_done() { tj_phase_is shortlived Succeeded ||
  grep -q 'job deleted after ttlSecondsAfterFinished.*job=default/shortlived' "$T/operator-a.log"; }
wait_for 120 "ttl job Succeeded" ttl_done
wait_for 20 "ttl job deleted" bash -c "! kubectl get tj shortlived >/dev/null 2>&1"
wait_for 20 "its pods gone" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=shortlived --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
# an invalid update of a running job keeps it running at its last valid spec (operator/reconcile.h R0b): never
# Failed, no pod deleted, condition InvalidSpec; a valid spec again resumes normal operation
# (400 epochs: it must still be running when the repair below lands; a fast machine finishes 6 epochs
# in about 3 s, and a finished job is not reconciled again, so its condition would stay)
fast_job steady 2 400 | k apply -f - >/dev/null
wait_for 60 "steady Running" tj_phase_is steady Running
uids=$(k get pods -l ringmaster.dev/job-name=steady -o jsonpath='{.items[*].metadata.uid}')
# the reported reproduction (kubectl scale to 10000, beyond the old maximum of 1024; 20000 now); an API server with the CRD's maximum refuses it outright (also fine)
k scale tj/steady --replicas=20000 >/dev/null 2>&1 || log "the API refused --replicas=20000"
k scale tj/steady --replicas=2 >/dev/null 2>&1 || true
# an invalid update no schema can refuse: minReplicas above replicas
k patch tj steady --type merge -p '{"spec":{"minReplicas":5}}' >/dev/null
cond_is() { [ "$(tj_field steady "{.status.conditions[?(@.type==\"InvalidSpec\")].status}")" = "$1" ]; }
wait_for 20 "InvalidSpec condition" cond_is True
tj_field steady '{.status.conditions[?(@.type=="InvalidSpec")].message}' | grep -q minReplicas ||
  fail "InvalidSpec does not name the field"
sleep 2
ph=$(tj_field steady '{.status.phase}')
[ "$ph" = Running ] || [ "$ph" = Succeeded ] || fail "an invalid update moved the job to $ph"
[ "$(k get pods -l ringmaster.dev/job-name=steady -o jsonpath='{.items[*].metadata.uid}')" = "$uids" ] ||
  [ "$ph" = Succeeded ] || fail "an invalid update replaced pods"
k get events -o json | $PY -c '
import json,sys
ev=json.load(sys.stdin)["items"]
assert any(e.get("reason")=="InvalidSpec" and e.get("type")=="Warning" and
           e.get("regarding",e.get("involvedObject",{})).get("name")=="steady" for e in ev)
' || fail "no InvalidSpec Warning event for the update"
k patch tj steady --type json -p '[{"op":"remove","path":"/spec/minReplicas"}]' >/dev/null
wait_for 20 "InvalidSpec cleared" cond_is False
# normal operation resumed: still Running on the same pods, no restart, steps still advancing
s1=$(tj_field steady '{.status.progress.step}')
wait_for 60 "steady advancing past step ${s1:-0}" bash -c "[ \"\$(kubectl get tj steady -o jsonpath='{.status.progress.step}')\" -gt ${s1:-0} ]"
[ "$(tj_field steady '{.status.phase}')" = Running ] || fail "steady is $(tj_field steady '{.status.phase}') after the repair"
[ "$(k get pods -l ringmaster.dev/job-name=steady -o jsonpath='{.items[*].metadata.uid}')" = "$uids" ] ||
  fail "the repair replaced pods"
[ "$(tj_field steady '{.status.restarts}')" = 0 ] || fail "the invalid update cost a restart"
k delete tj steady --wait=false >/dev/null
# managedBy someone else
fast_job foreign 1 1 | sed 's/^  replicas: 1$/  replicas: 1\n  runPolicy: {managedBy: kueue.x-k8s.io\/multikueue}/' | k apply -f - >/dev/null
sleep 3
[ "$(pod_count foreign)" -eq 0 ] || fail "operator created pods for a job managed by another controller"
[ -z "$(tj_field foreign '{.status.phase}')" ] || fail "operator wrote status of a foreign job"
log "PASS"
