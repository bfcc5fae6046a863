#!/usr/bin/env bash
# 69-operator-ps: the operator on kubesim with a parameterServer TrainingJob
# (docs/strategies.md#parameter-servers): it creates <job>-ps-<i> pods (label ringmaster.dev/role: ps,
# ringmaster.dev/ps-index, no replica-index, the launch contract's server settings, the token from the
# job's Secret) beside <job>-worker-<i> pods (role: worker), the server processes start and serve
# (kubesim's kubelet runs ringmaster-worker ps), status.parameterServers reports {replicas: 2,
# readyReplicas: 2}, a deleted server pod is recreated, and `kubectl delete tj` removes every pod. (The
# job trains meanwhile — the servers register with the rendezvous — and is given epochs enough to
# outlast these checks; training to the end with a server killed is tests/e2e/69-operator-ps-train.sh.)
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
mkdir -p "$T/ckpt/default/pst"   # stands in for the shared volume
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: pst}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: async}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 600}
  checkpoint: {path: $T/ckpt, intervalSteps: 50}
  training:
    model: {type: mlp, hidden: [64]}
    epochs: 200
    optimizer: {type: adagrad, lr: 0.01}
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
wait_for 30 "2 server pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=pst,ringmaster.dev/role=ps --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
wait_for 30 "2 worker pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=pst,ringmaster.dev/role=worker --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
k get pod pst-ps-1 -o json | $PY -c '
import json, sys
p = json.load(sys.stdin); l = p["metadata"]["labels"]
assert l["ringmaster.dev/role"] == "ps" and l["ringmaster.dev/ps-index"] == "1", l
assert "ringmaster.dev/replica-index" not in l, l
c = p["spec"]["containers"][0]
assert c["args"][0] == "ps", c.get("args")
env = {e["name"]: e for e in c["env"]}
assert env["RINGMASTER_ROLE"]["value"] == "ps" and env["RINGMASTER_PS_INDEX"]["value"] == "1"
assert env["RINGMASTER_PS_ADDRS"]["value"] == "pst-ps-0.pst:29600,pst-ps-1.pst:29600", env["RINGMASTER_PS_ADDRS"]
assert "secretKeyRef" in env["RINGMASTER_TOKEN"]["valueFrom"]
assert p["spec"]["hostname"] == "pst-ps-1" and p["spec"]["subdomain"] == "pst"
' || fail "server pod settings"
wait_for 60 "status.parameterServers ready 2" bash -c \
  "[ \"\$(kubectl get tj pst -o jsonpath='{.status.parameterServers.readyReplicas}')\" = 2 ]"
[ "$(k get tj pst -o jsonpath='{.status.parameterServers.replicas}')" = 2 ] || fail "status.parameterServers.replicas"
uid=$(k get pod pst-ps-0 -o jsonpath='{.metadata.uid}')
k delete pod pst-ps-0 --wait=true --timeout=30s >/dev/null
wait_for 30 "server 0 recreated" bash -c "u=\$(kubectl get pod pst-ps-0 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid ]"
k delete tj pst --wait=true --timeout=30s >/dev/null
wait_for 45 "every pod gone" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=pst --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
log "PASS"
