#!/usr/bin/env bash
# `ringmaster export` and a remote model.init.uri (docs/models-and-data.md, "Exported models"):
# the newest checkpoint of a finished job's checkpoint folder — plain, pipeline-staged (each
# stage's writer its own files) and ZeRO-3-sharded — exported by the command equals the job's own export byte for
# byte (float32), and in bfloat16 holds the same tensors rounded; errors name the flag. Then the
# job's export, served over HTTP by tests/e2e/fixtures/range_server.py (loopback), is the
# model.init.uri of a new job — the weights file and the export folder URI — which starts at the
# loss where the first job ended, far below a fresh start; a remote model of another shape is
# refused naming spec.training.model.init.uri and the tensor with both shapes.
source "$(dirname "$0")/5x-run-lib.bash"
FIX="$RM_ROOT/tests/e2e/fixtures"
SRV_PID=""
trap 'rc=$?; [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null; (exit $rc); cleanup' EXIT
export RINGMASTER_DATA_CACHE="$W/cache"

# job NAME STEPS [INIT] (SPEC_EXTRA: one more line under spec; HIDDEN: the hidden width)
job() {
  local init=""
  [ -z "${3:-}" ] || init=", init: {uri: \"$3\"}"
  cat >"$W/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0.2, progressDeadlineSeconds: 30}
  checkpoint: {intervalSteps: 1000}
  training:
    mode: train
    dataset: fashion-mnist
    model: {type: mlp, hidden: [${HIDDEN:-64}]$init}
    epochs: 1
    maxSteps: $2
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 0
    ${TRAINING_EXTRA:-}
  ${SPEC_EXTRA:-}
EOF
}
loss0() { grep -h 'msg="training done".* rank=0' "$W"/run-"$1"/worker-*.log | grep -o 'train_loss=[0-9.]*' | cut -d= -f2; }
rmexport() { # OUTNAME ARGS...: runs ringmaster export; sets RC
  local n=$1; shift
  set +e; "$RM_BIN/ringmaster" export "$@" >"$W/$n.out" 2>"$W/$n.err"; RC=$?; set -e
}

# 1. a plain checkpoint folder
job tr 150
run_job tr -f "$W/tr.yaml" -o json
[ "$RC" -eq 0 ] || fail "training exit $RC"
EX="$W/ck-tr/export"
rmexport e1 --checkpoint "$W/ck-tr" --out "$W/e1"
[ "$RC" -eq 0 ] || fail "export exit $RC: $(cat "$W/e1.err")"
cmp "$W/e1/model.safetensors" "$EX/model.safetensors" || fail "ringmaster export's weights differ from the job's export"
cmp "$W/e1/config.json" "$EX/config.json" || fail "config.json differs"
$PY -c "import json,sys; j=json.load(open('$W/e1.out')); assert j['step']==150 and j['uri']=='$W/e1/model.safetensors', j" ||
  fail "export's JSON line: $(cat "$W/e1.out")"
[ "$($PY -c "import json; print(json.load(open('$W/e1.out'))['sha256'])")" = "$(sha256sum "$EX/model.safetensors" | cut -c1-64)" ] ||
  fail "export's sha256"
# bfloat16: the same tensors, rounded
rmexport e2 --checkpoint "$W/ck-tr" --out "file://$W/e2" --dtype bfloat16
[ "$RC" -eq 0 ] || fail "bfloat16 export exit $RC: $(cat "$W/e2.err")"
$PY - "$RM_ROOT/tests/py" "$W/e2/model.safetensors" "$EX/model.safetensors" <<'PY' || fail "the bfloat16 export"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, st_lite
a, _ = st_lite.load(sys.argv[2]); b, _ = st_lite.load(sys.argv[3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in b:
    x, y = np.asarray(a[k], np.float32), np.asarray(b[k], np.float32)
    assert x.shape == y.shape, k
    r = np.linalg.norm(x - y) / np.linalg.norm(y)
    assert r < 1e-2, (k, r)
print("bf16 ok")
PY

# 2. pipeline stages: each stage's writer holds its layers; the command assembles them
SPEC_EXTRA="parallelism: {pipelineStages: 2, microBatches: 2, schedule: 1f1b}" job pp 40
run_job pp -f "$W/pp.yaml" -o json
[ "$RC" -eq 0 ] || fail "pipeline job exit $RC"
rmexport e3 --checkpoint "$W/ck-pp" --out "$W/e3"
[ "$RC" -eq 0 ] || fail "pipeline export exit $RC: $(cat "$W/e3.err")"
cmp "$W/e3/model.safetensors" "$W/ck-pp/export/model.safetensors" || fail "pipeline: the command's export differs from the job's"

# ZeRO-3: every rank's shard of the parameters, assembled
TRAINING_EXTRA="sharding: full" job z3 40
run_job z3 -f "$W/z3.yaml" -o json
[ "$RC" -eq 0 ] || fail "sharded job exit $RC"
rmexport e4 --checkpoint "$W/ck-z3" --out "$W/e4"
[ "$RC" -eq 0 ] || fail "sharded export exit $RC: $(cat "$W/e4.err")"
cmp "$W/e4/model.safetensors" "$W/ck-z3/export/model.safetensors" || fail "sharded: the command's export differs from the job's"

# 3. errors name the flag
rmexport x1 --checkpoint "$W/ck-tr"
[ "$RC" -eq 2 ] && grep -q -- '--out: required' "$W/x1.err" || fail "missing --out: rc=$RC $(cat "$W/x1.err")"
rmexport x2 --checkpoint "$W/nope" --out "$W/x2"
[ "$RC" -ne 0 ] && grep -q -- "--checkpoint: $W/nope" "$W/x2.err" || fail "bad --checkpoint: rc=$RC $(cat "$W/x2.err")"
rmexport x3 --checkpoint "$W/ck-tr" --out "$W/x3" --dtype fp16
[ "$RC" -eq 2 ] && grep -q -- '--dtype: must be float32 or bfloat16' "$W/x3.err" || fail "bad --dtype: rc=$RC $(cat "$W/x3.err")"
rmexport x4 --checkpoint "$W/ck-tr" --out "https://example.org/m/"
[ "$RC" -eq 2 ] && grep -q -- '--out: must be a folder' "$W/x4.err" || fail "bad --out: rc=$RC $(cat "$W/x4.err")"
"$RM_BIN/ringmaster" export --help | grep -q -- '--checkpoint DIR' || fail "export --help"

# 4. the export over HTTP as model.init.uri: the file, and the folder (config.json checked)
mkdir -p "$W/www/run-1"
cp "$EX/model.safetensors" "$EX/config.json" "$W/www/run-1/"
$PY "$FIX/range_server.py" --dir "$W/www" --port-file "$W/srv.port" --log "$W/srv.log" 2>"$W/srv.err" &
SRV_PID=$!
for _ in $(seq 1 100); do [ -s "$W/srv.port" ] && break; sleep 0.05; done
PORT=$(cat "$W/srv.port") || fail "the HTTP server did not start"
job ft 1 "http://127.0.0.1:$PORT/run-1/model.safetensors"
run_job ft -f "$W/ft.yaml" -o json
[ "$RC" -eq 0 ] || fail "fine-tune from http exit $RC: $(grep -h 'training failed' "$W"/run-ft/worker-*.log | head -2)"
grep -q 'msg="model init fetched" uri=http://127.0.0.1:'"$PORT"'/run-1/model.safetensors' "$W"/run-ft/worker-*.log || fail "no fetch logged"
job fo 1 "http://127.0.0.1:$PORT/run-1/"
run_job fo -f "$W/fo.yaml" -o json
[ "$RC" -eq 0 ] || fail "fine-tune from the http folder exit $RC"
job fr 1
run_job fr -f "$W/fr.yaml" -o json
[ "$RC" -eq 0 ] || fail "fresh exit $RC"
lt=$(loss0 tr) lft=$(loss0 ft) lfo=$(loss0 fo) lfr=$(loss0 fr)
log "first loss: from http $lft (folder $lfo), fresh $lfr; the first job ended at $lt"
[ "$lft" = "$lfo" ] || fail "the file and the folder start differently: $lft $lfo"
$PY -c "import sys; sys.exit(0 if $lft < 0.7 * $lfr and abs($lft - $lt) < 0.35 else 1)" ||
  fail "the fine-tune's first loss $lft is not where the first job ended ($lt; fresh $lfr)"
# another shape: the fetched file's tensors are checked (no config.json beside a file URI)
HIDDEN=32 job bad 1 "http://127.0.0.1:$PORT/run-1/model.safetensors"
run_job bad -f "$W/bad.yaml" -o json
[ "$RC" -ne 0 ] || fail "a 784-32-10 job started from a 784-64-10 model"
grep -hq 'spec.training.model.init.uri: .*layers.0.weight.*\[64, 784\].*\[32, 784\]\|spec.training.model.init.uri: .*layers.0.weight.*\[32, 784\].*\[64, 784\]' "$W"/run-bad/worker-*.log ||
  fail "shape refusal: $(grep -h 'training failed' "$W"/run-bad/worker-*.log | head -2)"
assert_no_workers
log "PASS"
