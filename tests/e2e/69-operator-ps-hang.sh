#!/usr/bin/env bash
# README "Failure semantics" row F7.
# e2e-timeout: 300
# 69-operator-ps-hang: a hung parameter server is replaced on a cluster too
# (docs/strategies.md#failure-semantics, "a server hangs"). The operator gives each <job>-ps-<i>
# pod a livenessProbe on /healthz (the server's own progress verdict, stalled after half of
# progressDeadlineSeconds); server 1's process is SIGSTOPped once it has a checkpoint, so its
# /healthz stops answering: kubesim's kubelet kills it, the operator replaces the pod (a log line
# names role ps, index 1), the replacement restores its shard and the job Succeeds without a
# group restart.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a --worker-metrics-port "$(free_port)" # a known port to probe (each pod has its own IP)
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
mkdir -p "$T/ckpt/default/pshang"
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: pshang}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 16}
  checkpoint: {path: $T/ckpt, intervalSteps: 50}
  training:
    model: {type: mlp, hidden: [64]}
    epochs: 2
    batchSizePerWorker: 128
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
ksdata=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)
ps1_pid() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -q "^RINGMASTER_CHECKPOINT_DIR=$T/" || continue
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx 'RINGMASTER_PS_INDEX=1' || continue
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx 'RINGMASTER_ROLE=ps' || continue
    echo "${p#/proc/}"; return 0
  done
  return 1
}
wait_for 120 "server 1 checkpointed version >= 50" bash -c \
  "[ -n \"\$(find '$T/ckpt' -path '*ps-1*' -name 'ckpt-*.rmck' | head -1)\" ]"
k get pod pshang-ps-1 -o json | $PY -c "import json,sys; c=json.load(sys.stdin)['spec']['containers'][0]; p=c['livenessProbe']; assert p['httpGet']['path']=='/healthz', p" ||
  fail "the server pod has no livenessProbe on /healthz"
uid=$(k get pod pshang-ps-1 -o jsonpath='{.metadata.uid}')
pid=$(ps1_pid) || fail "server 1's process not found"
log "SIGSTOP server 1 (pid $pid)"
kill -STOP "$pid"
wait_for 60 "server 1 replaced" bash -c "u=\$(kubectl get pod pshang-ps-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid ]"
grep -q 'liveness probe failed, killing" pod=default/pshang-ps-1' "$T/kubesim.log" || fail "the kubelet did not kill the stopped server"
grep -q 'parameter server pod failed, replacing it" job=default/pshang role=ps index=1' "$T"/operator-a*.log ||
  fail "no operator line naming the hung server"
wait_for 60 "the replacement restored its shard" bash -c "grep -qh 'shard restored' '$ksdata'/logs/*/*.log"
wait_for 200 "job Succeeded" tj_phase_is pshang Succeeded
restarts=$(tj_field pshang '{.status.restarts}')
[ "${restarts:-0}" = 0 ] || fail "a hung server restarted the workers (status.restarts=$restarts)"
k delete tj pshang --wait=true --timeout=60s >/dev/null
log "PASS operator: a SIGSTOPped server was killed by its livenessProbe and replaced; job Succeeded"
