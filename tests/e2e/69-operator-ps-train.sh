#!/usr/bin/env bash
# e2e-timeout: 1200
# 69-operator-ps-train: the operator on kubesim trains a parameterServer TrainingJob to the end
# (docs/strategies.md#parameter-servers): 2 servers (<job>-ps-<i> pods), 4 workers, synchronous with
# one backup worker, on Fashion-MNIST. kubesim's process kubelet serves no cluster DNS, so this is what
# shows that workers find the servers the way docs/strategies.md asks: each server registers its address (its pod
# IP) with the rendezvous, workers read the list from there. Mid-run server 1's process is
# SIGKILLed: the operator replaces its pod, the replacement restores its shard from its own newest
# checkpoint and registers again, workers reconnect (bounded back-off) without a group restart, and
# the job Succeeds with testAccuracy >= 0.875.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
mkdir -p "$T/ckpt/default/pstrain"   # stands in for the shared volume
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: pstrain}
spec:
  replicas: 4
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 1}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 1, progressDeadlineSeconds: 120}
  checkpoint: {path: $T/ckpt, intervalSteps: 100}
  training:
    model: {type: mlp, hidden: [512, 256]}
    epochs: 8
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 1
    schedule: cosine
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
ksdata=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)
ps1_pid() {   # the running server 1 of this test (its env names our checkpoint folder)
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -q "^RINGMASTER_CHECKPOINT_DIR=$T/" || continue
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx 'RINGMASTER_PS_INDEX=1' || continue
    tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx 'RINGMASTER_ROLE=ps' || continue
    echo "${p#/proc/}"; return 0
  done
  return 1
}
newest_ps1_ckpt() { find "$T/ckpt" -path '*ps-1*' -name 'ckpt-*.rmck' 2>/dev/null | sort | tail -1; }
# training: the servers' checkpoints advance (the workers found them through the rendezvous).
# Server 1 is killed as soon as it has a checkpoint past the start: a sync step is one round trip
# per server now, and the whole job can take well under a minute, so the checks that need no
# running server come after the kill.
wait_for 600 "server 1 checkpointed version >= 200" bash -c \
  "f=\$(find '$T/ckpt' -path '*ps-1*' -name 'ckpt-*.rmck' | sort | tail -1); [ -n \"\$f\" ] && v=\${f##*ckpt-}; [ -n \"\${v:-}\" ] && [ \$((10#\${v%.rmck})) -ge 200 ]"
wait_for 60 "status.parameterServers ready 2" bash -c \
  "[ \"\$(kubectl get tj pstrain -o jsonpath='{.status.parameterServers.readyReplicas}')\" = 2 ]"
uid=$(k get pod pstrain-ps-1 -o jsonpath='{.metadata.uid}')
pid=$(ps1_pid) || fail "server 1's process not found"
log "SIGKILL server 1 (pid $pid) after $(basename "$(newest_ps1_ckpt)")"
kill -9 "$pid"
grep -h 'registered with the rendezvous' "$ksdata"/logs/*/*.log | head -2 | sed 's/^/  /'
[ "$(grep -lh 'registered with the rendezvous' "$ksdata"/logs/*/*.log | wc -l)" -ge 2 ] ||
  fail "the servers did not register with the rendezvous"
grep -qh 'parameter server 1 is at 127\.0\.' "$ksdata"/logs/*/*.log ||
  fail "no worker learned server 1's pod IP from the rendezvous"
wait_for 120 "server 1 replaced" bash -c "u=\$(kubectl get pod pstrain-ps-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid ]"
wait_for 120 "the replacement restored its shard" bash -c "grep -qh 'shard restored' '$ksdata'/logs/*/*.log"
grep -h 'shard restored' "$ksdata"/logs/*/*.log | head -1 | sed 's/^/  /'
wait_for 900 "job Succeeded" tj_phase_is pstrain Succeeded
acc=$(tj_field pstrain '{.status.result.testAccuracy}')
restarts=$(tj_field pstrain '{.status.restarts}')
[ "${restarts:-0}" = 0 ] || fail "a server's death restarted the workers (status.restarts=$restarts)"
$PY -c "import sys; sys.exit(0 if $acc >= 0.875 else 1)" || fail "testAccuracy $acc < 0.875"
k delete tj pstrain --wait=true --timeout=60s >/dev/null
log "PASS operator PS job (2 servers, 4 workers, sync b=1) Succeeded after server 1 was killed: testAccuracy=$acc"
