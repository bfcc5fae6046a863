#!/usr/bin/env bash
# 69-operator-swarm: the operator at full size without a process per pod — kubesim's swarm runtime
# (--runtime swarm, tests/kubesim/swarm_rt.h; docs/scale.md "The swarm as a kubelet runtime") runs
# every worker pod as a simulated worker inside one `ringmaster-worker swarm --kubelet` process,
# through the operator's real rendezvous (join, kv bootstrap, reports with steps advancing).
#   - JOBS (20) jobs x WORKERS (50): every job Succeeds with rank 0's result at its
#     training.maxSteps, and every pod ends Succeeded with exit code 0 (cleanPodPolicy None keeps
#     them): the pods that finished their steps and those the stopped rendezvous sent home;
#   - one more job loses a worker (POST /kubesim/swarm-kill): its pod fails with 137, the operator
#     restarts the group (WorkerFailed, restarts 1), the replacement and the survivors re-join and
#     the job Succeeds; kill on a pod the swarm does not run answers 404.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
JOBS=${JOBS:-20}; WORKERS=${WORKERS:-50}
export KUBESIM_SWARM_ARGS="--step 0.05 --report 1"
start_kubesim --runtime swarm
install_crd
start_operator a --kube-api-qps 2000 --kube-api-burst 2000
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

job() {  # job NAME WORKERS STEPS [RUN_POLICY_YAML]
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  backend: ring
  ${4:-}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  training: {mode: train, model: {type: mlp, hidden: [16]}, epochs: 1, batchSizePerWorker: 8, maxSteps: $3}
  template: {spec: {containers: [{name: worker, image: ringmaster/worker:latest}]}}
YAML
}

# the victim first (200 steps: 10 s, time to kill a worker mid-run), then the fleet
job victim 8 200 | k apply -f - >/dev/null
for i in $(seq -w 1 "$JOBS"); do job "sw-$i" "$WORKERS" 40 "runPolicy: {cleanPodPolicy: None}"; echo ---; done |
  k apply -f - >/dev/null
log "$JOBS x $WORKERS workers + victim x 8 applied"

wait_for 60 "victim Running" tj_phase_is victim Running
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$KS_URL/kubesim/swarm-kill?namespace=default&pod=no-such-pod")
[ "$code" = 404 ] || fail "swarm-kill of an unknown pod answered $code, not 404"
curl -fsS -X POST "$KS_URL/kubesim/swarm-kill?namespace=default&pod=victim-worker-3" >/dev/null ||
  fail "swarm-kill victim-worker-3"
wait_for 30 "victim restarted" bash -c "[ \"\$(kubectl get tj victim -o jsonpath='{.status.restarts}')\" = 1 ]"
wait_for 10 "a WorkerFailed event" bash -c \
  "kubectl get events --field-selector involvedObject.name=victim,reason=WorkerFailed,type=Warning -o jsonpath='{.items[*].message}' | grep 'worker 3 failed (exit code 137'"

done_all() {
  local n
  n=$(k get tj -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Succeeded$' || true)
  [ "$n" -eq $((JOBS + 1)) ]
}
wait_for 120 "every job Succeeded" done_all
[ "$(tj_field victim '{.status.restarts}')" = 1 ] || fail "victim restarts: $(tj_field victim '{.status.restarts}')"

# the workers still reporting hear "stop" from the finished jobs' rendezvous at their next report
fleet_pods_done() {
  local n
  n=$(k get pods -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}' | grep -c '^sw-.* Succeeded$' || true)
  [ "$n" -eq $((JOBS * WORKERS)) ]
}
wait_for 30 "every fleet pod Succeeded" fleet_pods_done
# every fleet job's result is rank 0's "done" report at its steps; every fleet pod exited 0
k get tj -o json >"$T/tjs.json"
k get pods -o json >"$T/pods.json"
$PY - "$T/tjs.json" "$T/pods.json" "$JOBS" "$WORKERS" <<'PY' || fail "fleet results or pods"
import json, sys
tjs = json.load(open(sys.argv[1]))["items"]; pods = json.load(open(sys.argv[2]))["items"]
jobs, workers = int(sys.argv[3]), int(sys.argv[4])
fleet = [t for t in tjs if t["metadata"]["name"].startswith("sw-")]
assert len(fleet) == jobs, len(fleet)
for t in fleet:
    st = t["status"]
    assert st["phase"] == "Succeeded" and st["result"]["steps"] == 40, (t["metadata"]["name"], st.get("result"))
    assert st.get("restarts", 0) == 0, (t["metadata"]["name"], st.get("restarts"))
mine = [p for p in pods if p["metadata"]["labels"].get("ringmaster.dev/job-name", "").startswith("sw-")]
assert len(mine) == jobs * workers, len(mine)
bad = []
for p in mine:
    cs = p["status"]["containerStatuses"][0]
    term = cs["state"].get("terminated") or {}
    if p["status"]["phase"] != "Succeeded" or term.get("exitCode") != 0:
        bad.append((p["metadata"]["name"], p["status"]["phase"], term))
assert not bad, bad[:5]
print("%d jobs Succeeded at 40 steps, %d pods Succeeded with exit 0" % (len(fleet), len(mine)))
PY
log "victim: restarts=$(tj_field victim '{.status.restarts}') steps=$(tj_field victim '{.status.result.steps}')"
log "PASS"
