#!/usr/bin/env bash
# "Why is my job stuck" (operator/reconcile.c R12, docs/trainingjob-api.md): a job whose worker pods
# cannot start says why in one condition, Blocked, with the cause as its reason and the pod's own
# words as its message, and a Warning event — on kubesim with one node of 2 CPUs and real kubectl:
#   - a worker asking for 8 CPUs: Unschedulable, with the scheduler's "0/1 nodes are available";
#   - an image kubesim cannot pull: ImagePullFailed, naming the image;
#   - a Secret the pod's env names that does not exist: ContainerConfigError, naming the Secret;
#     creating the Secret lets the pods start: Blocked turns False and the job Succeeds.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim --node blk-n1:cpu=2,memory=8Gi,pods=20
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

blocked_is() { [ "$(tj_field "$1" '{.status.conditions[?(@.type=="Blocked")].status}')" = "$2" ] &&
               [ "$(tj_field "$1" '{.status.conditions[?(@.type=="Blocked")].reason}')" = "$3" ]; }
bmsg() { tj_field "$1" '{.status.conditions[?(@.type=="Blocked")].message}'; }
event_for() { k get events --field-selector "involvedObject.name=$1,reason=$2,type=Warning" --no-headers 2>/dev/null | grep -q .; }

fast_job big 1 1 | sed 's|        image: ringmaster/worker:latest|        image: ringmaster/worker:latest\n        resources: {requests: {cpu: "8"}}|' |
  k apply -f - >/dev/null
wait_for 30 "big Blocked Unschedulable" blocked_is big True Unschedulable
grep -q 'worker 0 cannot start: Unschedulable: 0/1 nodes are available' <<<"$(bmsg big)" || fail "big: $(bmsg big)"
wait_for 10 "a Warning event Unschedulable" event_for big Unschedulable
log "unschedulable: $(bmsg big)"
k delete tj big --wait=false >/dev/null

fast_job pull 1 1 | sed 's|image: ringmaster/worker:latest|image: example.org/nope/worker:9|' | k apply -f - >/dev/null
wait_for 30 "pull Blocked ImagePullFailed" blocked_is pull True ImagePullFailed
grep -q 'example.org/nope/worker:9' <<<"$(bmsg pull)" || fail "pull: $(bmsg pull)"
wait_for 10 "a Warning event ImagePullFailed" event_for pull ImagePullFailed
log "image: $(bmsg pull)"
k delete tj pull --wait=false >/dev/null

fast_job cfg 1 1 "        env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: blk-secret, key: token}}}]" | k apply -f - >/dev/null
wait_for 30 "cfg Blocked ContainerConfigError" blocked_is cfg True ContainerConfigError
grep -q 'blk-secret' <<<"$(bmsg cfg)" || fail "cfg: $(bmsg cfg)"
log "config: $(bmsg cfg)"
cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Secret
metadata: {name: blk-secret}
stringData: {token: s3cret}
YAML
wait_for 90 "cfg Succeeded once the Secret exists" tj_phase_is cfg Succeeded
blocked_is cfg False PodsStarting || fail "Blocked not cleared: $(tj_field cfg '{.status.conditions}')"
k get tj cfg -o 'jsonpath={.status.conditions[?(@.type=="Blocked")].message}' | grep -q 'no worker pod is blocked' ||
  fail "cleared message"
log "the Secret created: Blocked cleared, Succeeded"
