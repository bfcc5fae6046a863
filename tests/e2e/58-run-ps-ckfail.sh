#!/usr/bin/env bash
# README "Failure semantics" row F8.
# e2e-timeout: 180
# A parameter server whose checkpoints fail gets a worker's treatment
# (docs/strategies.md#failure-semantics): server 0's checkpoint folder cannot be created (a file
# stands where CHECKPOINT_DIR/ps-0 should be), so every write fails; the server reports the failures
# with its registration, the runner raises the CheckpointFailing condition and its Warning event
# naming "parameter server 0", and once the failures outlast progressDeadlineSeconds the job Fails
# with reason CheckpointFailing (exit 1) instead of training on without checkpoints.
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 20 "$f"; }; done >&2; true; }

cat > "$W/ps.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: psckfail}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 0}
  restartPolicy: {maxRestarts: 2, backoffSeconds: 0.2, progressDeadlineSeconds: 8}
  checkpoint: {intervalSteps: 10}
  training:
    model: {type: mlp, hidden: [32]}
    epochs: 100
    maxSteps: 40000
    batchSizePerWorker: 32
    optimizer: {type: sgd, lr: 0.05}
    warmupEpochs: 0
YAML
mkdir -p "$W/ck"
echo "not a folder" > "$W/ck/ps-0"
t0=$(date +%s)
set +e
timeout 120 "$RM_BIN/ringmaster" run -f "$W/ps.yaml" -o json --checkpoint-dir "$W/ck" --run-dir "$W/run" \
  >"$W/ck.out" 2>"$W/ck.err"
RC=$?
set -e
dt=$(( $(date +%s) - t0 ))
grep -q 'shard checkpoint write failed' "$W/run/ps-0.log" || { psdump; fail "server 0's writes did not fail"; }
grep -q 'reason=CheckpointFailing.*parameter server 0: [0-9]* checkpoint write' "$W/ck.err" ||
  { psdump; fail "no CheckpointFailing event naming parameter server 0"; }
[ $RC -eq 1 ] || { psdump; fail "exit $RC (want 1: the job fails)"; }
[ "$(jget ck 'j["status"]["phase"]')" = Failed ] || fail "phase $(jget ck 'j["status"]["phase"]')"
[ "$(jget ck '[c["reason"] for c in j["status"]["conditions"] if c["type"]=="Failed"][0]')" = CheckpointFailing ] ||
  fail "Failed reason is not CheckpointFailing"
[ $dt -lt 90 ] || fail "took ${dt}s"
assert_no_workers
log "PASS failed with CheckpointFailing after ${dt}s"
