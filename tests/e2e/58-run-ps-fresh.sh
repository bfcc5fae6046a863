#!/usr/bin/env bash
# README "Failure semantics" row F10.
# e2e-timeout: 300
# Parameter-server state obeys the checkpoint rules (docs/strategies.md#failure-semantics):
#  1. a fresh run of a job whose earlier run left server shards (CHECKPOINT_DIR/ps-<i>/) starts at
#     version 0 and trains all its steps, and says it removed the earlier run's files;
#  2. --resume continues every server from one version all shards hold: shard 1's newer
#     checkpoint is removed, both servers restore the same version, and the workers follow;
#     with a shard folder emptied, --resume refuses (exit 2) naming the folders;
#  3. an L-BFGS job run again without --resume starts fresh (pass 0, the coordinator's state and
#     the shards' vectors removed) instead of "finishing" at once with the old result;
#  4. a PS run stopped by SIGINT after its servers checkpointed says so ("continue with --resume"),
#     not "no checkpoint was written".
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 20 "$f"; }; done >&2; true; }

cat > "$W/ps.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: psfresh}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 0}
  restartPolicy: {maxRestarts: 2, backoffSeconds: 0.2, progressDeadlineSeconds: 60}
  checkpoint: {intervalSteps: 20}
  training:
    model: {type: mlp, hidden: [32]}
    epochs: 1
    maxSteps: 60
    batchSizePerWorker: 32
    optimizer: {type: sgd, lr: 0.05}
    warmupEpochs: 0
YAML
CK="$W/ck"
run() { # NAME [args...]
  local name=$1; shift
  set +e
  "$RM_BIN/ringmaster" run -f "$W/ps.yaml" -o json --checkpoint-dir "$CK" --run-dir "$W/run-$name" "$@" \
    >"$W/$name.out" 2>"$W/$name.err"
  RC=$?
  set -e
}

# 1. fresh after an earlier run
run first
[ $RC -eq 0 ] || { psdump; fail "first run: exit $RC"; }
ls "$CK/ps-0"/ckpt-*60*.rmck "$CK/ps-1"/ckpt-*60*.rmck >/dev/null || fail "no shard checkpoints at version 60"
run second
[ $RC -eq 0 ] || { psdump; fail "second run: exit $RC"; }
grep -q 'shard restored' "$W/run-second/ps-0.log" && { psdump; fail "a fresh run restored the earlier run's shard"; }
grep -q 'parameter server ready.* version=0 ' "$W/run-second/ps-0.log" || { psdump; fail "server 0 did not start at version 0"; }
grep -Eq 'removed [0-9]+ files of an earlier run' "$W/second.err" || fail "the runner did not say it removed the earlier run's files"
n=$(sed -n 's/.*removed \([0-9]*\) files of an earlier run.*/\1/p' "$W/second.err" | head -1)
[ "$n" -ge 2 ] || fail "removed only $n files (the server shards not counted)"
[ "$(jget second 'j["status"]["result"]["steps"]')" -ge 60 ] || fail "the fresh run did not train its 60 steps: $(jget second 'j["status"]["result"]')"
log "fresh run: started at version 0, removed $n files"

# 2. --resume: shard 1 holds a newer checkpoint than shard 0 -> both continue from the common one
cp "$(ls "$CK/ps-1"/ckpt-*.rmck | sort | tail -1)" "$CK/ps-1/ckpt-000000000077.rmck"
sed -i 's/maxSteps: 60/maxSteps: 100/' "$W/ps.yaml"
run resume --resume
[ $RC -eq 0 ] || { psdump; fail "--resume: exit $RC"; }
grep -q 'every parameter server continues from version 60' "$W/resume.err" || fail "--resume did not name the common version"
[ -f "$CK/ps-1/ckpt-000000000077.rmck" ] && fail "shard 1's newer checkpoint was kept"
grep -q 'shard restored.* version=60 ' "$W/run-resume/ps-0.log" || { psdump; fail "server 0 did not restore version 60"; }
grep -q 'shard restored.* version=60 ' "$W/run-resume/ps-1.log" || { psdump; fail "server 1 did not restore version 60"; }
[ "$(jget resume 'j["status"]["result"]["steps"]')" = 100 ] || fail "the workers did not go on from the servers' step to 100: $(jget resume 'j["status"]["result"]')"
log "--resume: both shards restored version 60, the workers went on to step 100"
rm -f "$CK/ps-1"/ckpt-*.rmck
run refuse --resume=if-present
[ $RC -eq 2 ] || fail "--resume with shard 1's checkpoints gone: exit $RC, want 2"
grep -q "share no version.*ps-1: newest none" "$W/refuse.err" || fail "the refusal does not name the folders: $(cat "$W/refuse.err")"
log "--resume with an inconsistent shard set refused"

# 3. L-BFGS run again without --resume
cat > "$W/lb.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: lbfresh}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync}
  restartPolicy: {maxRestarts: 2, backoffSeconds: 0.2, progressDeadlineSeconds: 60}
  training:
    model: {type: mlp, hidden: [16]}
    epochs: 2
    batchSizePerWorker: 500
    optimizer: {type: lbfgs, history: 4, portions: 4}
    warmupEpochs: 0
YAML
for name in lb1 lb2; do
  set +e
  "$RM_BIN/ringmaster" run -f "$W/lb.yaml" -o json --checkpoint-dir "$W/ck-lb" --run-dir "$W/run-$name" \
    >"$W/$name.out" 2>"$W/$name.err"
  RC=$?
  set -e
  [ $RC -eq 0 ] || { psdump; fail "$name: exit $RC"; }
done
grep -q 'coordinator state restored' "$W/run-lb2/ps-0.log" && { psdump; fail "a fresh L-BFGS run restored the coordinator's state"; }
grep -q 'shard restored' "$W/run-lb2/ps-1.log" && { psdump; fail "a fresh L-BFGS run restored a shard"; }
grep -Eq 'removed [0-9]+ files of an earlier run' "$W/lb2.err" || fail "L-BFGS: no 'removed' line"
log "L-BFGS: the second run started fresh"

# 4. SIGINT after the servers checkpointed
sed -i 's/maxSteps: 100/maxSteps: 100000/' "$W/ps.yaml"
"$RM_BIN/ringmaster" run -f "$W/ps.yaml" -o json --checkpoint-dir "$W/ck-int" --run-dir "$W/run-int" \
  >"$W/int.out" 2>"$W/int.err" &
RUNNER_PID=$!
# compgen -G, not ls: the server writes a checkpoint every 20 steps and prunes the older ones, so a
# name the glob expanded to can be gone when ls looks at it (ls then fails with checkpoints present)
for i in $(seq 1 300); do compgen -G "$W/ck-int/ps-1/ckpt-*.rmck" >/dev/null && break; sleep 0.1; done
compgen -G "$W/ck-int/ps-1/ckpt-*.rmck" >/dev/null || { psdump; fail "no shard checkpoint before SIGINT"; }
kill -INT "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; RC=$?; set -e; RUNNER_PID=""
[ $RC -eq 130 ] || fail "SIGINT: exit $RC"
grep -q 'continue with --resume' "$W/int.err" || fail "after SIGINT the runner does not count the servers' checkpoints: $(grep 'stopped by signal' "$W/int.err")"
assert_no_workers
log "PASS"
