#!/usr/bin/env bash
# README "Failure semantics" row F1.
# 61-operator-restart: a worker dies mid-training (RINGMASTER_FAULT in the pod template: rank 1
# exits abruptly at step 120). The operator restarts the group (epoch+1, only the failed pod
# replaced), the job still Succeeds with status.restarts = 1, and a Warning event says why.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a --log-format json
# the pods outlive the job: worker-0's uid is read after the restart, when a fast job may be done
KEEP_PODS=1 fast_job crashy 2 1 "        env: [{name: RINGMASTER_FAULT, value: 'exit:rank=1:step=120'}]" | k apply -f - >/dev/null
wait_for 30 "2 pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=crashy --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
uid0=$(k get pod crashy-worker-0 -o jsonpath='{.metadata.uid}')
wait_for 90 "a restart" bash -c "[ \"\$(kubectl get tj crashy -o jsonpath='{.status.restarts}')\" = 1 ]"
# the survivor re-joins in place: right after the restart worker-0 is the same pod (uid); only
# the failed worker is deleted (the SuccessfulDeletePod events below say which)
uid0b=$(k get pod crashy-worker-0 -o jsonpath='{.metadata.uid}' 2>/dev/null || echo gone)
[ "$uid0" = "$uid0b" ] || fail "worker-0 was replaced too (uid $uid0 -> $uid0b): only the failed pod may be"
wait_for 150 "crashy Succeeded" tj_phase_is crashy Succeeded
[ "$(tj_field crashy '{.status.restarts}')" = "1" ] || fail "restarts != 1"
ep=$(tj_field crashy '{.status.epoch}')
# the first round of a fresh rendezvous is epoch 1; the restart moved the group past it
[ "${ep:-0}" -ge 2 ] || fail "epoch did not move past the first round's (1): $ep"
k get events -o json | $PY -c '
import json,sys
ev=json.load(sys.stdin)["items"]
d=[(e.get("message") or e.get("note") or "") for e in ev if e.get("reason")=="SuccessfulDeletePod"]
failed=[m for m in d if "(failed" in m]
assert any("crashy-worker-1 " in m for m in failed), d
assert not any("crashy-worker-0 " in m for m in failed), d
' || fail "the failed pod and only it is deleted for the restart"
k get events -o json | $PY -c '
import json,sys
ev=json.load(sys.stdin)["items"]
w=[(e.get("reason"),e.get("message") or e.get("note")) for e in ev if e.get("type")=="Warning"]
assert any(r in ("WorkerFailed","ProgressDeadlineExceeded") for r,_ in w), w
print("warning events:", w)
' || fail "no Warning event explaining the restart"
[ "$(metric "$OP_METRICS_a" '^ringmaster_jobs_restarted_total')" -ge 1 ] || fail "metric restarted"
$PY -c '
import json,sys
n=0
for l in open(sys.argv[1]):
    if l.startswith("{"):
        json.loads(l); n+=1
assert n>3, n
' "$T/operator-a.log" || fail "--log-format json lines do not parse"
log "PASS"
