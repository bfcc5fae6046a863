#!/usr/bin/env bash
# 51-run-runtime: `ringmaster run --runtimes` (docs/trainingjob-api.md#runtimes). A job that names a
# ClusterTrainingRuntime runs with the runtime's fields where it is silent and its own where it sets
# them (the -o json result shows the merged spec; the step count comes from the runtime's maxSteps);
# a folder and a file both resolve; a missing runtime, a job run without --runtimes and an invalid
# runtime are refused with exit 2 and a message naming spec.runtimeRef.name (and the runtime's own
# field), a TrainingSweep whose trials name a runtime too (run does not resolve those); the shipped examples that use deploy/runtimes validate against them. About 10 s.
source "$(dirname "$0")/5x-run-lib.bash"
mkdir -p "$W/rt"
cat > "$W/rt/small.yaml" <<'Y'
apiVersion: ringmaster.dev/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: small-cpu}
spec:
  template:
    replicas: 2
    backend: ring
    restartPolicy: {maxRestarts: 7, backoffSeconds: 0.2, progressDeadlineSeconds: 20}
    checkpoint: {intervalSteps: 20}
    training:
      model: {type: mlp, hidden: [32]}
      batchSizePerWorker: 64
      optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
      maxSteps: 60
      warmupEpochs: 0
Y
cat > "$W/job.yaml" <<'Y'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: rtjob}
spec:
  runtimeRef: {name: small-cpu}
  training:
    epochs: 1
    optimizer: {lr: 0.05}
Y
run_job rt -f "$W/job.yaml" --runtimes "$W/rt" -o json
[ $RC -eq 0 ] || fail "exit $RC: $(tail -3 "$W/rt.err")"
[ "$(jget rt 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
got=$(jget rt '(j["spec"]["replicas"], j["spec"]["restartPolicy"]["maxRestarts"], j["spec"]["training"]["model"]["hidden"], j["spec"]["training"]["optimizer"]["type"], j["spec"]["training"]["optimizer"]["lr"], j["spec"]["training"]["epochs"], j["spec"]["runtimeRef"]["name"], j["status"]["result"]["steps"])')
[ "$got" = "(2, 7, [32], 'sgd', 0.05, 1, 'small-cpu', 60)" ] || fail "merged spec/result: $got"
log "ok - the runtime's fields and the job's overrides: $got"
assert_no_workers

# the same runtime from a file; errors name the field
"$RM_BIN/ringmaster" validate -f "$W/job.yaml" --runtimes "$W/rt/small.yaml" >/dev/null || fail "--runtimes FILE"
expect2() {  # expect2 PATTERN ringmaster ARGS...: exit 2 and stderr matching PATTERN
  local pat=$1; shift
  set +e; "$RM_BIN/ringmaster" "$@" >/dev/null 2>"$W/e.err"; local rc=$?; set -e
  [ $rc -eq 2 ] && grep -qE "$pat" "$W/e.err" || fail "$*: rc=$rc $(cat "$W/e.err")"
  log "ok - $(cat "$W/e.err")"
}
sed 's/name: small-cpu/name: nope/' "$W/job.yaml" > "$W/nope.yaml"
expect2 'nope\.yaml:5: spec\.runtimeRef\.name: ClusterTrainingRuntime "nope" not found in' run -f "$W/nope.yaml" --runtimes "$W/rt"
expect2 'spec\.runtimeRef\.name: ClusterTrainingRuntime "small-cpu" is not known here: .*--runtimes' run -f "$W/job.yaml"
sed 's/model: {type: mlp, hidden: \[32\]}/modle: {type: mlp}/' "$W/rt/small.yaml" > "$W/bad.yaml"
expect2 'spec\.runtimeRef\.name: ClusterTrainingRuntime "small-cpu" \(.*bad\.yaml\) is invalid: spec\.template\.training\.modle: unknown field' \
  validate -f "$W/job.yaml" --runtimes "$W/bad.yaml"
sed 's/kind: ClusterTrainingRuntime/kind: TrainingRuntime/' "$W/rt/small.yaml" > "$W/ns.yaml"
expect2 'spec\.runtimeRef\.name: ClusterTrainingRuntime "small-cpu" not found' validate -f "$W/job.yaml" --runtimes "$W/ns.yaml"

# a TrainingSweep's trials on a runtime: the operator resolves them, run refuses rather than drop it
printf 'apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingSweep\nmetadata: {name: sw}\nspec:\n  parameters: [{path: training.optimizer.lr, values: [0.05]}]\n  trialTemplate:\n    runtimeRef: {name: small-cpu}\n' > "$W/sweep.yaml"
expect2 'sweep\.yaml:[0-9]+: spec\.trialTemplate\.runtimeRef: ringmaster run does not resolve training runtimes' \
  run -f "$W/sweep.yaml" --runtimes "$W/rt"

# the shipped examples that use the shipped runtimes
for f in "$RM_ROOT"/deploy/examples/*runtime*.yaml; do
  "$RM_BIN/ringmaster" validate -f "$f" --runtimes "$RM_ROOT/deploy/runtimes" || fail "$f with deploy/runtimes"
done
log "PASS"
