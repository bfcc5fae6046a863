#!/usr/bin/env bash
# 67-operator-node-lost: the node goes NotReady while a job trains and a worker pod is deleted
# (as an eviction would): on a NotReady node the deletion never completes (the kubelet is gone),
# so the operator force-deletes the pod (gracePeriodSeconds=0) after --force-delete-after, the
# group restarts, and once the node is back the job finishes instead of hanging.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
HIDDEN="1024, 1024"
start_kubesim
install_crd
start_operator a --force-delete-after 6
fast_job stranded 2 2 | k apply -f - >/dev/null
wait_for 60 "Running" tj_phase_is stranded Running
uid=$(k get pod stranded-worker-1 -o jsonpath='{.metadata.uid}')
curl -fsS -X POST "$KS_URL/kubesim/node-not-ready" >/dev/null
sleep 1
k delete pod stranded-worker-1 --wait=false >/dev/null
# read at once: after --force-delete-after (6 s) the operator removes it (two kubectl calls on a
# loaded machine took more than the 3 s this used to allow)
[ -n "$(k get pod stranded-worker-1 -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ] || fail "pod not stuck Terminating"
# force-deleted: the object with the old uid disappears (a replacement may appear under the same name)
wait_for 20 "force delete" bash -c "[ \"\$(kubectl get pod stranded-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null)\" != '$uid' ]"
grep -q 'gracePeriodSeconds' "$T/kubesim.log" 2>/dev/null || true
log "stuck pod force-deleted; node back"
curl -fsS -X POST "$KS_URL/kubesim/node-ready" >/dev/null
wait_for 240 "stranded Succeeded" tj_phase_is stranded Succeeded
log "restarts=$(tj_field stranded '{.status.restarts}') accuracy=$(tj_field stranded '{.status.result.testAccuracy}')"
log "PASS"
