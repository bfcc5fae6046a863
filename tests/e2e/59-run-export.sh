#!/usr/bin/env bash
# Export and model.init.uri (docs/models-and-data.md, "Exported models"): a short Fashion-MNIST run
# (the example's MLP, smaller) writes <checkpoint dir>/export/{model.safetensors,config.json};
# Python reads them with its own safetensors parser (tests/py/st_lite.py) and its forward pass
# over the 10,000 test images agrees with the job's testAccuracy (and, where torch is installed,
# torch's nn.Linear loads the state dict strictly); a job started from the export (init.uri, a
# folder or the file, file:/// or a plain path) starts at a lower loss than a fresh one, and
# parameter servers start from it too; a model
# of another shape is refused naming spec.training.model.init.uri; a remote init.uri validates.
source "$(dirname "$0")/5x-run-lib.bash"

# job NAME STEPS [INIT]: a TrainingJob manifest in $W/NAME.yaml (hidden width 64, or HIDDEN;
# TRAINING_EXTRA and SPEC_EXTRA: one more line under spec.training / spec)
job() {
  local name=$1 steps=$2 hidden=${HIDDEN:-64} init=""
  [ -z "${3:-}" ] || init=", init: {uri: \"$3\"}"
  cat >"$W/$name.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $name}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0.2, progressDeadlineSeconds: 30}
  checkpoint: {intervalSteps: 1000}
  training:
    mode: train
    dataset: fashion-mnist
    model: {type: mlp, hidden: [$hidden]$init}
    epochs: 1
    maxSteps: $steps
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 0
    ${TRAINING_EXTRA:-}
  ${SPEC_EXTRA:-}
EOF
}
fnv() { grep -h 'msg="training done"' "$W"/run-"$1"/worker-*.log | grep -o 'params_fnv64=[0-9a-f]*' | sort -u | cut -d= -f2; }
# loss0 NAME: rank 0's last training loss (status.result.trainLoss is whichever rank reported last)
loss0() { grep -h 'msg="training done".* rank=0' "$W"/run-"$1"/worker-*.log | grep -o 'train_loss=[0-9.]*' | cut -d= -f2; }
# export_fnv DIR: FNV-1a 64 of the flat parameter vector rebuilt from an MLP export (nn.Linear's
# [out, in] transposed back to the flat [in, out], then the bias): the workers' params_fnv64
export_fnv() {
  $PY - "$RM_ROOT/tests/py" "$1" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import st_lite
t, _ = st_lite.load(sys.argv[2] + "/model.safetensors")
flat = b"".join(t["layers.%d.weight" % l].T.astype("<f4").tobytes() + t["layers.%d.bias" % l].astype("<f4").tobytes()
                for l in range(len(t) // 2))
h = 0xcbf29ce484222325
for byte in flat:
    h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
print("%016x" % h)
PY
}

# 1. train briefly: the export is written beside the checkpoints
job tr 150
run_job tr -f "$W/tr.yaml" -o json
[ $RC -eq 0 ] || fail "training exit $RC"
EX="$W/ck-tr/export"
[ -s "$EX/model.safetensors" ] && [ -s "$EX/config.json" ] || fail "no export in $EX: $(ls -la "$W/ck-tr" "$EX" 2>&1)"
grep -q "model exported.*path=$EX/model.safetensors" "$W"/run-tr/worker-*.log || fail "the export's path is not logged"
acc=$(jget tr 'j["status"]["result"]["testAccuracy"]')
loss_tr=$(loss0 tr)

[ "$(export_fnv "$EX")" = "$(fnv tr)" ] || fail "the export is not the trained parameters: $(export_fnv "$EX") != $(fnv tr)"

# the whole model from strategies that spread it: ZeRO-3 shards, 2 pipeline stages
TRAINING_EXTRA="sharding: full" job z3 40
SPEC_EXTRA="parallelism: {pipelineStages: 2, microBatches: 2, schedule: 1f1b}" job pp 40
for n in z3 pp; do
  run_job $n -f "$W/$n.yaml" -o json
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(fnv $n | wc -l)" = 1 ] || fail "$n: ranks disagree: $(fnv $n)"
  [ $n = z3 ] || grep -q "stage" "$W"/run-$n/worker-0.log || fail "$n: not a pipeline"
  [ "$(export_fnv "$W/ck-$n/export")" = "$(fnv $n)" ] || fail "$n: export $(export_fnv "$W/ck-$n/export") != params $(fnv $n)"
  log "$n: export = parameters ($(fnv $n))"
done

# 2. Python reads it (numpy; torch too when installed) and computes the same test accuracy
$PY - "$RM_ROOT/tests/py" "$EX" "$acc" <<'PY' || fail "Python's reading of the export"
import gzip, json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import st_lite
ex, acc = sys.argv[2], float(sys.argv[3])
cfg = json.load(open(ex + "/config.json"))
assert cfg["model_type"] == "ringmaster-mlp" and cfg["widths"] == [784, 64, 10], cfg
t, meta = st_lite.load(ex + "/model.safetensors")
assert meta == {"format": "pt"}, meta
assert sorted(t) == ["layers.0.bias", "layers.0.weight", "layers.1.bias", "layers.1.weight"], sorted(t)
assert t["layers.0.weight"].shape == (64, 784) and t["layers.1.weight"].shape == (10, 64)  # nn.Linear [out, in]
d = "/usr/share/datasets/fashion-mnist/"
x = np.frombuffer(gzip.open(d + "t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 784)
y = np.frombuffer(gzip.open(d + "t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
h = np.maximum(x.astype(np.float32) / 255 @ t["layers.0.weight"].T + t["layers.0.bias"], 0)
ours = float((np.argmax(h @ t["layers.1.weight"].T + t["layers.1.bias"], 1) == y).mean())
print("python accuracy %.4f, the job's %.4f" % (ours, acc))
assert abs(ours - acc) <= 0.002, (ours, acc)
try:
    import torch
except ImportError:
    print("torch not installed: numpy only")
else:
    net = torch.nn.Module()
    net.layers = torch.nn.ModuleList([torch.nn.Linear(784, 64), torch.nn.Linear(64, 10)])
    net.load_state_dict({k: torch.from_numpy(v) for k, v in t.items()}, strict=True)
    with torch.no_grad():
        xt = torch.from_numpy(x.astype(np.float32) / 255)
        p = net.layers[1](torch.relu(net.layers[0](xt))).argmax(1).numpy()
    tacc = float((p == y).mean())
    print("torch accuracy %.4f" % tacc)
    assert abs(tacc - acc) <= 0.002, (tacc, acc)
PY

# 3. a job started from the export begins where the first one ended; a fresh one at chance
job ft 1 "file://$EX"
run_job ft -f "$W/ft.yaml" -o json
[ $RC -eq 0 ] || fail "fine-tune exit $RC"
grep -q "model init from weights.*path=$EX/model.safetensors" "$W"/run-ft/worker-*.log || fail "init not logged"
job fr 1
run_job fr -f "$W/fr.yaml" -o json
[ $RC -eq 0 ] || fail "fresh exit $RC"
loss_ft=$(loss0 ft)
loss_fr=$(loss0 fr)
log "first loss: from the export $loss_ft, fresh $loss_fr (the first job ended at $loss_tr)"
$PY -c "import sys; sys.exit(0 if $loss_ft < 0.7 * $loss_fr else 1)" || fail "fine-tune's first loss $loss_ft is not below the fresh run's $loss_fr"
# the weights file itself, as a plain path, reads the same
job ft2 1 "$EX/model.safetensors"
run_job ft2 -f "$W/ft2.yaml" -o json
[ $RC -eq 0 ] || fail "fine-tune from the file exit $RC"
[ "$(loss0 ft2)" = "$loss_ft" ] && [ "$(fnv ft2)" = "$(fnv ft)" ] || fail "the file and its folder start differently"

# parameter servers hold the parameters: they start from the export too (2 steps from random
# weights reach ~0.3; from the export, the export's accuracy)
SPEC_EXTRA="parameterServer: {replicas: 1, mode: sync}
  strategy: parameterServer" job ps 2 "$EX"
run_job ps -f "$W/ps.yaml" -o json
[ $RC -eq 0 ] || fail "parameter-server fine-tune exit $RC"
ps_acc=$(jget ps 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $ps_acc > $acc - 0.05 else 1)" || fail "parameter servers did not start from the export: accuracy $ps_acc"

# 4. refusals: another shape (the config.json says so), a remote URI
HIDDEN=32 job bad 1 "$EX"
run_job bad -f "$W/bad.yaml" -o json
[ $RC -ne 0 ] || fail "a 784-32-10 job started from a 784-64-10 export"
grep -q 'spec.training.model.init.uri: .*describes a mlp model 784-64-10; this job trains mlp 784-32-10' "$W"/run-bad/worker-*.log ||
  fail "shape refusal not named: $(grep -h 'training failed' "$W"/run-bad/worker-*.log | head -2)"
job s3 1 "s3://models/x/model.safetensors"   # fetched first (tests/e2e/59-run-export-cmd.sh)
set +e; out=$("$RM_BIN/ringmaster" validate -f "$W/s3.yaml" 2>&1); rc=$?; set -e
[ $rc -eq 0 ] || fail "remote init.uri refused: rc=$rc $out"
assert_no_workers
log "PASS accuracy=$acc loss: fine-tune $loss_ft < fresh $loss_fr"
