#!/usr/bin/env bash
# README "Failure semantics" row F12.
# 69-operator-spec-change: edits to a running TrainingJob never kill it silently
# (docs/trainingjob-api.md#changing-a-running-job). kubesim does not evaluate CEL, so the API takes
# patches a real API server refuses by the CRD's transition rules (checked structurally by the unit
# suite spec_guard): this is the operator's own guard, as with an old CRD without the rules.
#  1. the running job records what its group runs (status.runningSpec);
#  2. patching spec.training.model.hidden, then spec.strategy: parameterServer, is not applied:
#     condition InvalidSpec (reason InvalidUpdate) and a Warning event name the fields, no
#     parameter server pod appears;
#  3. after an operator restart (kill -9: nothing kept in memory), a worker deleted after the
#     patches is recreated from the running spec (RINGMASTER_TRAINING and RINGMASTER_STRATEGY as
#     before);
#  4. an allowed change takes effect: spec.replicas 2 -> 3 adds worker-2, from the running spec too;
#  5. reverting the edits clears the condition, and the job Succeeds.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
KEEP_PODS=1 fast_job guard 2 ${GUARD_EPOCHS:-10} | k apply -f - >/dev/null
wait_for 60 "guard Running" tj_phase_is guard Running
env_of() { k get pod "$1" -o "jsonpath={.spec.containers[0].env[?(@.name==\"$2\")].value}" 2>/dev/null; }
cond_msg() { tj_field guard "{.status.conditions[?(@.type==\"$1\")].$2}"; }
train0=$(env_of guard-worker-1 RINGMASTER_TRAINING)
strat0=$(env_of guard-worker-1 RINGMASTER_STRATEGY)
uid1=$(k get pod guard-worker-1 -o jsonpath='{.metadata.uid}')
[ -n "$train0" ] || fail "worker-1 has no RINGMASTER_TRAINING"
log "1. status.runningSpec"
wait_for 10 "status.runningSpec" bash -c "[ \"\$(kubectl get tj guard -o jsonpath='{.status.runningSpec.training.model.hidden}')\" = '[128]' ]"

log "2. immutable edits are not applied"
k patch tj guard --type merge -p '{"spec":{"training":{"model":{"hidden":[64]}}}}' >/dev/null
wait_for 20 "InvalidSpec naming spec.training.model.hidden" \
  bash -c "kubectl get tj guard -o jsonpath='{.status.conditions[?(@.type==\"InvalidSpec\")].message}' | grep -q 'spec.training.model.hidden: cannot change'"
[ "$(cond_msg InvalidSpec status)" = True ] && [ "$(cond_msg InvalidSpec reason)" = InvalidUpdate ] \
  || fail "InvalidSpec: $(cond_msg InvalidSpec status) $(cond_msg InvalidSpec reason)"
k patch tj guard --type merge -p '{"spec":{"strategy":"parameterServer"}}' >/dev/null
wait_for 20 "InvalidSpec naming spec.strategy too" \
  bash -c "kubectl get tj guard -o jsonpath='{.status.conditions[?(@.type==\"InvalidSpec\")].message}' | grep -q 'spec.strategy, spec.training.model.hidden'"
k get events -o json | $PY -c '
import json,sys
ev=json.load(sys.stdin)["items"]
w=[(e.get("message") or e.get("note") or "") for e in ev if e.get("type")=="Warning" and e.get("reason")=="InvalidSpec"]
assert any("spec.training.model.hidden" in m for m in w), w
print("warning:", w[0])
' || fail "no Warning event naming the field"
sleep 2
k get pod guard-ps-0 >/dev/null 2>&1 && fail "a parameter server pod was created beside the allreduce workers"
[ "$(tj_field guard '{.status.runningSpec.training.model.hidden}')" = "[128]" ] || fail "status.runningSpec moved"

log "3. a replacement gets the running spec, also from an operator that knows only status"
kill -9 "$OP_PID_a"
start_operator b
k delete pod guard-worker-1 --wait=false >/dev/null
wait_for 60 "a new guard-worker-1" bash -c "u=\$(kubectl get pod guard-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid1 ]"
[ "$(env_of guard-worker-1 RINGMASTER_TRAINING)" = "$train0" ] \
  || fail "the replacement got another spec.training: $(env_of guard-worker-1 RINGMASTER_TRAINING) (group runs $train0)"
[ "$(env_of guard-worker-1 RINGMASTER_STRATEGY)" = "$strat0" ] || fail "the replacement got another strategy"

log "4. an allowed change (replicas 2 -> 3) takes effect"
k patch tj guard --type merge -p '{"spec":{"replicas":3}}' >/dev/null
wait_for 60 "guard-worker-2" bash -c "kubectl get pod guard-worker-2 >/dev/null 2>&1"
[ "$(env_of guard-worker-2 RINGMASTER_TRAINING)" = "$train0" ] || fail "worker-2 got another spec.training"
wait_for 60 "a round of 3 workers" bash -c "[ \"\$(kubectl get tj guard -o jsonpath='{.status.replicas}')\" = 3 ]"
k get pod guard-ps-0 >/dev/null 2>&1 && fail "a parameter server pod appeared"

log "5. reverting clears the condition; the job Succeeds"
k patch tj guard --type json -p '[{"op":"replace","path":"/spec/training/model/hidden","value":[128]},{"op":"remove","path":"/spec/strategy"}]' >/dev/null
wait_for 20 "InvalidSpec False" bash -c "[ \"\$(kubectl get tj guard -o jsonpath='{.status.conditions[?(@.type==\"InvalidSpec\")].status}')\" = False ]"
wait_for 150 "guard Succeeded" tj_phase_is guard Succeeded
log "restarts=$(tj_field guard '{.status.restarts}') steps=$(tj_field guard '{.status.result.steps}')"
log "PASS"
