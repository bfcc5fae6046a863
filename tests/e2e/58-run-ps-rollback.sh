#!/usr/bin/env bash
# README "Failure semantics" row F6.
# e2e-timeout: 240
# A server that dies never leaves a reset or older shard beside the others' newer ones
# (docs/strategies.md#failure-semantics): every server rolls back to the newest version all shards
# hold and the workers follow.
#  1. server 1 killed at version 50 (checkpoints every 20): the runner rolls every server back to
#     version 40, both servers restore 40, the job Succeeds with all its steps and no worker restart;
#  2. server 1 killed at version 10, before the first checkpoint: every server restarts from the
#     initial parameters at version 0 (server 0 does not keep its trained shard), the job Succeeds;
#  3. async (Downpour): server 1 killed at version 50 -> both servers restore 40 (server 0 with its
#     draws, the epoch budget's position), the job Succeeds with its steps.
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 20 "$f"; }; done >&2; true; }

cat > "$W/ps.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: psrollback}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 0}
  restartPolicy: {maxRestarts: 2, backoffSeconds: 0.2, progressDeadlineSeconds: 60}
  checkpoint: {intervalSteps: 20}
  training:
    model: {type: mlp, hidden: [32]}
    epochs: 1
    maxSteps: 150
    batchSizePerWorker: 32
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
YAML
for case in after:50:40 before:10:0; do
  IFS=: read -r name at want <<<"$case"
  RINGMASTER_FAULT="exit:role=ps:index=1:step=$at" run_job "$name" -f "$W/ps.yaml" -o json
  [ $RC -eq 0 ] || { psdump; fail "$name: exit $RC"; }
  grep -q "fault injected\" kind=exit role=ps index=1 version=$at" "$W/run-$name/ps-1.log" || { psdump; fail "$name: the fault did not fire"; }
  if [ "$want" -gt 0 ]; then
    grep -q "parameter server 1 exited; every server rolls back to version $want" "$W/$name.err" ||
      { psdump; fail "$name: the runner did not roll the servers back to $want"; }
    for i in 0 1; do
      grep -q "shard restored.* version=$want " "$W/run-$name/ps-$i.log" || { psdump; fail "$name: server $i did not restore version $want"; }
    done
  else
    grep -q "parameter server 1 exited and no version is checkpointed by every shard" "$W/$name.err" ||
      { psdump; fail "$name: the runner did not restart the servers from the initial parameters"; }
    grep -q 'shard restored' "$W/run-$name/ps-0.log" && { psdump; fail "$name: server 0 restored a shard"; }
    [ "$(grep -c 'parameter server ready.* version=0 ' "$W/run-$name/ps-0.log")" -ge 2 ] ||
      { psdump; fail "$name: server 0 did not restart at version 0 (it kept its trained shard)"; }
  fi
  [ "$(grep -c 'incarnation' "$W/run-$name/ps-0.log")" -ge 2 ] || fail "$name: server 0 was not rolled back with server 1"
  [ "$(jget "$name" 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "$name: phase"; }
  [ "$(jget "$name" 'j["status"]["result"]["steps"]')" = 150 ] || fail "$name: steps $(jget "$name" 'j["status"]["result"]')"
  [ "$(jget "$name" 'j["status"]["restarts"]')" = 0 ] || fail "$name: the workers restarted"
  log "$name: server 1 killed at version $at; every server went back to version $want"
done
sed -i 's/mode: sync, backupWorkers: 0/mode: async, stalenessBound: 4/; s/momentum: 0.9/momentum: 0.0/' "$W/ps.yaml"
RINGMASTER_FAULT="exit:role=ps:index=1:step=50" run_job async -f "$W/ps.yaml" -o json
[ $RC -eq 0 ] || { psdump; fail "async: exit $RC"; }
grep -q "parameter server 1 exited; every server rolls back to version 40" "$W/async.err" || { psdump; fail "async: no rollback to 40"; }
grep -Eq 'shard restored.* version=40 draws=4[0-9] ' "$W/run-async/ps-0.log" || { psdump; fail "async: server 0 did not restore version 40 with its draws"; }
grep -q 'shard restored.* version=40 ' "$W/run-async/ps-1.log" || { psdump; fail "async: server 1 did not restore version 40"; }
[ "$(jget async 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "async: phase"; }
log "async: every server went back to version 40"
assert_no_workers
log "PASS"
