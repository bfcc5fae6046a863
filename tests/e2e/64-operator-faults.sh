#!/usr/bin/env bash
# 64-operator-faults: kubesim drops every watch and answers the next watches with 410 Expired; a job
# created meanwhile is still seen (re-list, nothing missed) and the watch-restart metric moves.
# Then 500s and 429s on pod creation and 409s on status updates are injected: the client retries
# (back-off, Retry-After) and the reconciler re-reads fresh state; every job still Succeeds.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
fault() { curl -fsS -X POST -H 'Content-Type: application/json' -d "$1" "$KS_URL/kubesim/faults" >/dev/null; }

# 1) watches dropped and expired; a job created in the gap must still be reconciled
fault '{"watch410": 6}'
curl -fsS -X POST "$KS_URL/kubesim/drop-watches" >/dev/null
fast_job gap 1 1 | k apply -f - >/dev/null
wait_for 30 "pod of job gap" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=gap --no-headers 2>/dev/null | grep -c .) -eq 1 ]"
wait_for 20 "watch restarts counted" bash -c "[ \$(curl -fsS http://127.0.0.1:$OP_METRICS_a/metrics | awk '/^ringmaster_watch_restarts_total/ {s+=\$2} END {print s+0}') -ge 1 ]"
grep -q 'reason=expired' "$T/operator-a.log" || fail "no re-list after 410"

# 2) API errors: 500 then 429 on pod creation, 409 on status writes
fault '{"failNext": 3, "code": 500, "verb": "create", "resource": "pods"}'
fast_job flaky 2 1 | k apply -f - >/dev/null
wait_for 30 "2 pods despite 500s" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=flaky --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
fault '{"failNext": 3, "code": 429, "verb": "create", "resource": "pods"}'
fast_job flaky2 1 1 | k apply -f - >/dev/null
wait_for 30 "pod despite 429s" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=flaky2 --no-headers 2>/dev/null | grep -c .) -eq 1 ]"
fault '{"failNext": 3, "code": 409, "verb": "update", "resource": "trainingjobs"}'
for j in gap flaky flaky2; do wait_for 150 "$j Succeeded" tj_phase_is "$j" Succeeded; done
codes=$(curl -fsS "http://127.0.0.1:$OP_METRICS_a/metrics" | grep '^ringmaster_api_requests_total' || true)
echo "$codes"
echo "$codes" | grep -q 'code="500"' || fail "no 500 seen by the client (fault not injected?)"
echo "$codes" | grep -q 'code="429"' || fail "no 429 seen by the client"
for j in gap flaky flaky2; do
  n=$(pod_count "$j"); want=$(tj_field "$j" '{.spec.replicas}')
  [ "$n" -le "$want" ] || fail "$j has $n pods for $want replicas"
done
k get events --field-selector type=Warning -o custom-columns=REASON:.reason,OBJ:.involvedObject.name,MSG:.message || true
log "PASS"
