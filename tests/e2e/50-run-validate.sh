#!/usr/bin/env bash
# ringmaster run/validate: invalid manifests and flags exit 2 with "FILE:LINE: field: message";
# the examples validate; version prints. (No workers are started.)
source "$(dirname "$0")/5x-run-lib.bash"
head='apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata:
  name: x
spec:'
mk() { printf '%s\n%s\n' "$head" "$2" > "$W/$1.yaml"; }
mk unknown '  replicas: 2
  colour: blue'
mk zero '  replicas: 0'
mk minmax '  replicas: 2
  minReplicas: 3'
mk syntax '  replicas: [2'
mk backend '  replicas: 2
  backend: gloo'
mk deep '  replicas: 2
  training:
    model: {type: mlp, hidden: [128]}
    optimizer: {type: sgd, lr: 0.1, mometum: 0.9}'

expect() {  # file regex
  set +e; "$RM_BIN/ringmaster" run -f "$W/$1.yaml" >"$W/$1.o" 2>"$W/$1.e"; local rc=$?; set -e
  [ $rc -eq 2 ] || fail "$1: exit $rc, want 2 ($(cat "$W/$1.e"))"
  grep -Eq "$2" "$W/$1.e" || fail "$1: stderr \"$(cat "$W/$1.e")\" does not match /$2/"
  log "ok $1: $(cat "$W/$1.e")"
}
expect unknown  "unknown\.yaml:7: spec\.colour: unknown field"
expect zero     "zero\.yaml:6: spec\.replicas: .*>= 1"
expect minmax   "minmax\.yaml:7: spec\.minReplicas: .*spec\.replicas"
expect syntax   "syntax\.yaml:[67]:[0-9]+: "
expect backend  "backend\.yaml:7: spec\.backend: .*gloo"
expect deep     "deep\.yaml:9: spec\.training\.optimizer\.mometum: unknown field"
[ ! -s "$W/unknown.o" ] || fail "stdout must stay empty on a manifest error"

# names a cluster would reject (docs/architecture.md#robustness): the job name is the headless Service's name
# (a DNS-1035 label) and the prefix of every pod hostname "<name>-worker-<i>" (at most 63)
for n in a.b 1job aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; do
  printf 'apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: %s\nspec:\n  replicas: 2\n' "$n" > "$W/name.yaml"
  set +e; "$RM_BIN/ringmaster" validate -f "$W/name.yaml" >"$W/name.o" 2>"$W/name.e"; rc=$?; set -e
  [ $rc -eq 2 ] || fail "name $n: validate exit $rc, want 2"
  grep -q "name.yaml:4: metadata.name: " "$W/name.e" || fail "name $n: $(cat "$W/name.e")"
  log "ok name $n: $(cat "$W/name.e")"
done
grep -q 'would be 69 characters' "$W/name.e" || fail "60-character name: $(cat "$W/name.e")"

# a global batch over the 60,000 training images (`run` once re-formed forever at "step 0/0")
mk bigbatch '  replicas: 2
  training:
    batchSizePerWorker: 40000'
expect bigbatch "bigbatch\.yaml:8: spec\.training\.batchSizePerWorker: the global batch spec\.replicas \(2\) x spec\.training\.batchSizePerWorker \(40000\) = 80000 samples is larger than the 60000 training samples"

# L-BFGS portions of whole batches that do not fit the training set (every worker once failed at start
# and the restarts burned): refused by validate, naming the field
mk lbfgs '  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 1}
  training:
    batchSizePerWorker: 250
    optimizer: {type: lbfgs, portions: 241}'
expect lbfgs "lbfgs\.yaml:11: spec\.training\.optimizer\.portions: 241 portions of at least one batch \(spec\.training\.batchSizePerWorker 250\) need 60250 samples"

# a memory budget (docs/architecture.md#robustness): a total-size cap, the container's memory limit,
# and locally every worker on this machine (RINGMASTER_MEMORY_LIMIT stands in for the physical memory here)
mk huge '  replicas: 1
  training:
    model: {type: mlp, hidden: [65536, 65536]}'
expect huge "huge\.yaml:8: spec\.training\.model\.hidden: the model has 4347133962 parameters, more than the 1073741824"
mk limit '  replicas: 1
  template:
    spec:
      containers:
      - name: worker
        resources: {limits: {memory: 64Mi}}'
expect limit "limit\.yaml:[0-9]+: spec\.training\.model: needs an estimated 95\.5 MiB per worker .*more than the worker container's memory limit \(64\.0 MiB\)"
mk local '  replicas: 4'
set +e; RINGMASTER_MEMORY_LIMIT=300Mi "$RM_BIN/ringmaster" validate -f "$W/local.yaml" >/dev/null 2>"$W/local.e"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "x 4 workers = 381.9 MiB, more than RINGMASTER_MEMORY_LIMIT" "$W/local.e" ||
  fail "local memory cap: rc=$rc $(cat "$W/local.e")"
RINGMASTER_MEMORY_LIMIT=400Mi "$RM_BIN/ringmaster" validate -f "$W/local.yaml" >/dev/null || fail "400Mi must fit 4 workers"
log "ok local memory: $(cat "$W/local.e")"

# clarity: control characters are escaped, a second job is an error, unknown
# top-level fields are errors, 2^63-1 is out of range, .inf is not finite, a folder is no manifest
printf '%s\n  replicas: 2\n  backend: "\\e[31mred\\a"\n' "$head" > "$W/ctrl.yaml"
set +e; "$RM_BIN/ringmaster" validate -f "$W/ctrl.yaml" >/dev/null 2>"$W/ctrl.e"; rc=$?; set -e
[ $rc -eq 2 ] || fail "ctrl: exit $rc"
if LC_ALL=C grep -q "$(printf '\033')" "$W/ctrl.e" || LC_ALL=C grep -q "$(printf '\007')" "$W/ctrl.e"; then
  fail "control characters printed raw: $(od -c "$W/ctrl.e" | head)"; fi
grep -q 'got "\\x1b\[31mred\\x07"' "$W/ctrl.e" || fail "ctrl: not escaped as \\xNN: $(cat "$W/ctrl.e")"
log "ok ctrl: $(cat "$W/ctrl.e")"
printf '%s\n  replicas: 1\n---\n%s\n  replicas: 2\n' "$head" "$head" > "$W/twodocs.yaml"
expect twodocs "twodocs\.yaml:9: a second TrainingJob \(document 2\)"
printf 'extra: 1\n%s\n  replicas: 1\n' "$head" > "$W/top.yaml"
expect top "top\.yaml:1: extra: unknown field"
mk big '  replicas: 1
  runPolicy: {activeDeadlineSeconds: 9223372036854775807}'
expect big "big\.yaml:7: spec\.runPolicy\.activeDeadlineSeconds: out of range"
mk inf '  replicas: 1
  training: {optimizer: {lr: .inf}}'
expect inf "inf\.yaml:7: spec\.training\.optimizer\.lr: must be a finite number"
set +e; "$RM_BIN/ringmaster" validate -f "$W" >/dev/null 2>"$W/dir.e"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "is a directory" "$W/dir.e" || fail "directory as -f: rc=$rc $(cat "$W/dir.e")"
# a checkpoint folder that cannot hold checkpoints is refused at start with exit 2
touch "$W/plainfile"
for d in "$W/plainfile" /proc/self; do
  set +e; "$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --checkpoint-dir "$d" --run-dir "$W/rd" >/dev/null 2>"$W/ck.e"; rc=$?; set -e
  [ $rc -eq 2 ] && grep -q "checkpoint folder $d: " "$W/ck.e" || fail "--checkpoint-dir $d: rc=$rc $(cat "$W/ck.e")"
  log "ok --checkpoint-dir $d: $(cat "$W/ck.e")"
done

# validate names the same errors and accepts the examples
set +e; "$RM_BIN/ringmaster" validate -f "$W/minmax.yaml" 2>"$W/v.e"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "minmax.yaml:7: spec.minReplicas" "$W/v.e" || fail "validate: rc=$rc $(cat "$W/v.e")"
for f in "$RM_ROOT"/deploy/examples/*.yaml; do   # (the examples on a runtime name deploy/runtimes')
  "$RM_BIN/ringmaster" validate -f "$f" --runtimes "$RM_ROOT/deploy/runtimes" >/dev/null || fail "example $f does not validate"
done
"$RM_BIN/ringmaster" validate -f "$RM_ROOT/deploy/examples/fashion-mnist.yaml" -o json |
  $PY -c 'import json,sys; j=json.load(sys.stdin); assert j["spec"]["replicas"]==4 and j["spec"]["training"]["epochs"]==10, j'

# bad flags
for args in "--replicas 0" "-o xml" "--bogus" "--metrics-addr nonsense" ""; do
  set +e; "$RM_BIN/ringmaster" run $args ${args:+-f "$FIX/small.yaml"} >/dev/null 2>"$W/f.e"; rc=$?; set -e
  [ $rc -eq 2 ] || fail "flags '$args': exit $rc, want 2"
done
for args in "-o xml" "-o" "--bogus"; do
  set +e; "$RM_BIN/ringmaster" validate -f "$FIX/small.yaml" $args >"$W/vf.o" 2>"$W/vf.e"; rc=$?; set -e
  [ $rc -eq 2 ] || fail "validate flags '$args': exit $rc, want 2"
  [ ! -s "$W/vf.o" ] || fail "validate flags '$args': printed a result"
done
set +e; "$RM_BIN/ringmaster" frobnicate >/dev/null 2>&1; rc=$?; set -e
[ $rc -eq 2 ] || fail "unknown command: exit $rc"
"$RM_BIN/ringmaster" version | grep -q "^ringmaster [0-9]" || fail "version"
assert_no_workers
log "PASS"
