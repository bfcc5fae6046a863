#!/usr/bin/env bash
# 66-operator-policies: runPolicy on kubesim — suspend (no pods, phase Suspended) then resume
# (pods created, job Succeeds); ttlSecondsAfterFinished (the finished job is deleted, its pods go
# with it); managedBy another controller (the operator leaves the job alone: no status, no pods).
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
wait_for 120 "ttl job Succeeded" tj_phase_is shortlived Succeeded
wait_for 20 "ttl job deleted" bash -c "! kubectl get tj shortlived >/dev/null 2>&1"
wait_for 20 "its pods gone" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=shortlived --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
# managedBy someone else
fast_job foreign 1 1 | sed 's/^  replicas: 1$/  replicas: 1\n  runPolicy: {managedBy: kueue.x-k8s.io\/multikueue}/' | k apply -f - >/dev/null
sleep 3
[ "$(pod_count foreign)" -eq 0 ] || fail "operator created pods for a job managed by another controller"
[ -z "$(tj_field foreign '{.status.phase}')" ] || fail "operator wrote status of a foreign job"
log "PASS"
