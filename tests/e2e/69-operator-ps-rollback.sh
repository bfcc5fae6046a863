#!/usr/bin/env bash
# e2e-timeout: 300
# README "Failure semantics" row F6.
# 69-operator-ps-rollback: under the operator a parameter server's death rolls every shard back to
# one version (docs/strategies.md#failure-semantics), though the operator never reads the servers'
# checkpoint folders and only replaces the dead server's pod: the servers agree among themselves
# through the rendezvous (worker/ps/ps_core.h rm_ps_agree_decide). 2 servers, 2 workers, sync,
# checkpoints every 20 versions:
#  1. server 1 exits at version 50: its replacement restores 40, server 0 (at 50) rolls its shard
#     back to 40 from its own folder, both log that they settled on 40, the job Succeeds;
#  2. server 1 exits at version 10, before any checkpoint: its replacement starts from the initial
#     parameters and server 0 goes back to them too (version 0), the job Succeeds.
# Before the agreement, server 0 kept its newer shard beside the replacement's older (or reset) one.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
ksdata=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)
# every incarnation of pod $1, oldest first (a pod's log folder is named by its uid: random order)
podlogs() { local f; for f in $(ls -tr "$ksdata"/logs/default_"$1"_*/*.log 2>/dev/null); do cat "$f"; done; }
job() {  # job NAME FAULT_VERSION
  mkdir -p "$T/ckpt/default/$1"   # stands in for the shared volume
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 0}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 20}
  training:
    model: {type: mlp, hidden: [32]}
    epochs: 1
    maxSteps: 150
    batchSizePerWorker: 32
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
        env:
        - {name: RINGMASTER_FAULT, value: "exit:role=ps:index=1:step=$2"}
YAML
}
for case in after:50:40 before:10:0; do
  IFS=: read -r name at want <<<"$case"
  job "$name" "$at" | k apply -f - >/dev/null
  wait_for 100 "$name: job Succeeded" tj_phase_is "$name" Succeeded
  P0=$(podlogs "$name-ps-0")
  P1=$(podlogs "$name-ps-1")
  grep -q "fault injected.* role=ps index=1 version=$at" <<<"$P1" || fail "$name: the fault did not fire"
  [ "$(grep -c 'parameter server ready' <<<"$P1")" -ge 2 ] || fail "$name: server 1 was not replaced"
  # both shards are the newest version both hold (server 0 never died: it restores it only because
  # the servers agreed to)
  if [ "$want" -gt 0 ]; then
    grep -q "shard restored.* version=$want " <<<"$P0" || fail "$name: server 0 did not restore version $want"
    [ "$(grep 'shard restored' <<<"$P1" | tail -1 | grep -o ' version=[0-9]* ')" = " version=$want " ] ||
      fail "$name: server 1's replacement did not restore version $want"
  fi
  # server 0 itself went back: it never died, so only the agreement moves it
  grep -q "shard rolled back to the group's version.* from=[0-9]* version=$want" <<<"$P0" ||
    fail "$name: server 0 kept its newer shard beside the replacement's"
  [ "$want" -gt 0 ] || grep -q 'shard reset to the initial parameters' <<<"$P0" ||
    fail "$name: server 0 did not go back to the initial parameters"
  for i in 0 1; do
    P=$P0; [ $i = 1 ] && P=$P1
    got=$(sed -n 's/.*parameter servers settled on.* version=\([0-9]*\).*/\1/p' <<<"$P" | tail -1)
    [ "$got" = "$want" ] || fail "$name: server $i settled on version '${got:-none}', want $want"
  done
  steps=$(tj_field "$name" '{.status.result.steps}')
  [ "$steps" = 150 ] || fail "$name: result steps '$steps', want 150"
  log "$name: server 1 killed at version $at; both servers settled on version $want: $(grep -h 'settled on' <<<"$P0" | tail -1 | sed 's/.*msg=//')"
  k delete tj "$name" --wait=true --timeout=60s >/dev/null
done
log "PASS operator PS rollback: every server settles on the newest common version (40), or on the initial parameters (0)"
