#!/usr/bin/env bash
# The transformer through `ringmaster run` (docs/models-and-data.md): the manifest's errors name
# their field; a 2-worker baby GPT on builtin:tinyshakespeare learns (evaluations every N steps,
# the validation loss falls); ZeRO-1/2/3 and synchronous parameter servers end with exactly the
# parameters plain allreduce ends with (the final checksum); a worker killed mid-run is replaced
# and the job recovers from its checkpoint; --resume continues from the last checkpoint.
source "$(dirname "$0")/5x-run-lib.bash"
EX="$RM_ROOT/deploy/examples/shakespeare-gpt.yaml"
# job FILE STEPS EVAL [extra spec lines after replicas / after batchSizePerWorker]
job() {
  # (no gradClip: parameter servers clip per push, so only unclipped runs match allreduce bit for bit)
  sed -e "s/maxSteps: 4000/maxSteps: $2/; s/evalEverySteps: 500/evalEverySteps: $3/; s/intervalSteps: 500/intervalSteps: 20/" \
      -e "s/warmupSteps: 100/warmupSteps: 10/; /gradClip/d" \
      -e "s|^  replicas: 2|  replicas: 2${4:-}|; s|^    batchSizePerWorker: 12|    batchSizePerWorker: 12${5:-}|" "$EX" > "$W/$1.yaml"
}
fnv() { grep -ho 'params_fnv64=[0-9a-f]*' "$W"/run-$1/worker-0.log | tail -1; }

log "== 1. field-named errors"
bad() { # NAME SED EXPECTED
  sed -e "$2" "$EX" > "$W/bad-$1.yaml"
  if "$RM_BIN/ringmaster" validate -f "$W/bad-$1.yaml" >"$W/bad-$1.txt" 2>&1; then fail "$1: validated"; fi
  grep -q -- "$3" "$W/bad-$1.txt" || fail "$1: $(cat "$W/bad-$1.txt")"
}
bad heads 's/heads: 4/heads: 3/' 'spec.training.model.heads'
bad idx 's|uri: builtin:tinyshakespeare|uri: builtin:fashion-mnist|; s/format: text/format: idx/' 'spec.training.model.type'
bad builtin 's|uri: builtin:tinyshakespeare|uri: builtin:nope|; /format: text/d' 'unknown built-in data set'
bad dropout 's/dropout: 0.0/dropout: 0.2/' 'spec.training.model.dropout.*not supported yet'
bad layers 's/layers: 4/layers: 0/' 'spec.training.model.layers'
bad context 's/context: 64/context: 0/' 'spec.training.model.context'

log "== 2. two workers learn; evaluations every 30 steps"
job learn 90 30
run_job learn -f "$W/learn.yaml" -o json
[ $RC -eq 0 ] || fail "exit $RC"
[ "$(jget learn 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
mapfile -t vl < <(grep -ho 'msg="evaluation".*test_loss=[0-9.]*' "$W"/run-learn/worker-0.log | sed 's/.*test_loss=//')
[ ${#vl[@]} -ge 3 ] || fail "evaluations: ${vl[*]}"
$PY -c "import sys; v=[float(x) for x in sys.argv[1:]]; sys.exit(0 if v[-1] < v[0] < 5.55 and v[-1] < 3.0 else 1)" "${vl[@]}" ||
  fail "validation loss did not fall: ${vl[*]}"
grep -q 'type=gpt shape=gpt-L4-H4-C128-T64-V256' "$W"/run-learn/worker-0.log || fail "model line"

log "== 3. ZeRO-1/2/3 and synchronous parameter servers end bit-identical to allreduce"
job ar 30 0
run_job ar -f "$W/ar.yaml"
[ $RC -eq 0 ] || fail "allreduce exit $RC"
want=$(fnv ar); [ -n "$want" ] || fail "no checksum"
for s in optimizer gradients full; do
  job z$s 30 0 "" "\n    sharding: $s"
  run_job z$s -f "$W/z$s.yaml"
  [ $RC -eq 0 ] || fail "sharding $s exit $RC"
  [ "$(fnv z$s)" = "$want" ] || fail "sharding $s: $(fnv z$s) != $want"
done
job ps 30 0 "\n  strategy: parameterServer\n  parameterServer: {replicas: 2, mode: sync}"
run_job ps -f "$W/ps.yaml"
[ $RC -eq 0 ] || fail "ps exit $RC"
[ "$(fnv ps)" = "$want" ] || fail "ps sync: $(fnv ps) != $want"
job async 30 0 "\n  strategy: parameterServer\n  parameterServer: {replicas: 2, mode: async}"
run_job async -f "$W/async.yaml" -o json
[ $RC -eq 0 ] && [ "$(jget async 'j["status"]["phase"]')" = Succeeded ] || fail "ps async"

log "== 4. a worker dies at step 50: replaced, recovered from the step-40 checkpoint"
job fault 70 0
RINGMASTER_FAULT="exit:rank=1:step=50" run_job fault -f "$W/fault.yaml" -o json
[ $RC -eq 0 ] || fail "faulted exit $RC"
[ "$(jget fault 'j["status"]["phase"]')" = Succeeded ] || fail "faulted phase"
[ "$(jget fault 'j["status"]["restarts"]')" -ge 1 ] || fail "no restart"
grep -hq 'checkpoint loaded.*step=40' "$W"/run-fault/worker-*.log || fail "no restore from step 40"

log "== 5. --resume continues past the last checkpoint"
job res 40 0
run_job res -f "$W/res.yaml"
[ $RC -eq 0 ] || fail "first run exit $RC"
sed -i 's/maxSteps: 40/maxSteps: 60/' "$W/res.yaml"
run_job res -f "$W/res.yaml" --resume -o json
[ $RC -eq 0 ] || fail "resume exit $RC"
[ "$(jget res 'j["status"]["result"]["steps"]')" = 60 ] || fail "steps after resume"
grep -hq 'checkpoint loaded.*step=40' "$W"/run-res/worker-*.log || fail "resume did not start from step 40"
assert_no_workers
log "PASS val_loss ${vl[0]} -> ${vl[-1]}"
