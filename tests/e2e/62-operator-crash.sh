#!/usr/bin/env bash
# 62-operator-crash: kill -9 the operator while a job trains, start a new one: no duplicate pods
# (deterministic names, AlreadyExists = success), the same pods keep running, the job finishes.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
HIDDEN="1024, 1024"   # slow enough (~10 s/epoch on 2 cores) to act mid-training
start_kubesim
install_crd
start_operator a
fast_job survivor 2 2 | k apply -f - >/dev/null
wait_for 30 "2 pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=survivor --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
wait_for 60 "Running" tj_phase_is survivor Running
sleep 2
uids_before=$(k get pods -l ringmaster.dev/job-name=survivor -o jsonpath='{.items[*].metadata.uid}')
log "kill -9 operator (pid $OP_PID_a)"
kill -9 "$OP_PID_a"
sleep 1
start_operator b
wait_for 20 "operator b ready" curl -fsS "http://127.0.0.1:$OP_PROBE_b/readyz"
sleep 3
n=$(pod_count survivor)
[ "$n" -eq 2 ] || fail "expected 2 pods after restart, got $n"
wait_for 240 "survivor Succeeded" tj_phase_is survivor Succeeded
names=$(k get pods -l ringmaster.dev/job-name=survivor -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort)
[ "$(echo "$names" | uniq -d | wc -l)" -eq 0 ] || fail "duplicate pod names"
[ "$(echo "$names" | grep -c .)" -le 2 ] || fail "more pods than replicas: $names"
log "pods before: $uids_before"
log "pods after:  $(k get pods -l ringmaster.dev/job-name=survivor -o jsonpath='{.items[*].metadata.uid}')"
log "restarts=$(tj_field survivor '{.status.restarts}') accuracy=$(tj_field survivor '{.status.result.testAccuracy}')"
log "PASS"
