#!/usr/bin/env bash
# bench/gpu/tensor_device.sh LOGDIR — the transformer's tensor parallelism on a GPU (bench/gpu/device.sh's
# "tensor" phase; docs/models-and-data.md, "Tensor parallelism"; docs/gpu.md). The lent machine has one
# GPU, so the T ranks share it (RINGMASTER_GPU_SHARED=1: CUDA time-slices the processes) and their
# tensor group runs over shared memory, each collective staged through pinned host buffers (NCCL
# refuses two ranks on one device). What that proves and measures:
#  1. correctness, exact fp32 (RM_CUDA_TF32=0): a small GPT on builtin:tinyshakespeare, 40 AdamW
#     steps with clipping, at T = 1, 2 and 4 and T = 2 x D = 2 through `ringmaster run` with
#     RINGMASTER_DEVICE=cuda; the exports (assembled from the ranks' pieces on the device) of T = 2 and
#     4 against T = 1's, T = 2 x D = 2's against D = 2's (the data-parallel allreduce strategy over the
#     ring, its device buffers staged through the host: worker/comm/comm_staged.h)
#     (tests/e2e/compare-safetensors.py);
#  2. memory: GPT-2 124M's shapes (synthetic llm.c token shards), T = 1 and T = 2, 20 steps each: the
#     workers' own parameter + optimizer bytes (their "memory" lines) and each process's device memory
#     (nvidia-smi, the largest sample), plus tokens/s - which on one shared GPU with host-staged
#     collectives says what the staging costs, not what T = 2 on two GPUs over NVLink would reach.
# Prints RESULT lines. TENSOR_SMALL=1 rehearses part 1 on the CPU (no GPU, no part 2).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
logs=${1:-build/tensor-device}
mkdir -p "$logs"
RM_BIN=${RM_BIN:-$root/bin}
PY=${PYTHON:-python3}
export RINGMASTER_DATASETS=$root/datasets RINGMASTER_LOG_EVERY=5
if [ "${TENSOR_SMALL:-0}" = 1 ]; then
  unset RINGMASTER_DEVICE
else
  export RINGMASTER_DEVICE=cuda RINGMASTER_GPU_SHARED=1
fi
fail=0

# mk NAME REPLICAS T MODEL DATA B STEPS
mk() {
  local par=""
  [ "$3" = 1 ] || par="  parallelism: {tensorParallel: $3}"
  cat >"$logs/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  backend: ring
  restartPolicy: {maxRestarts: 0, backoffSeconds: 1, progressDeadlineSeconds: 120}
  checkpoint: {intervalSteps: 100000}
$par
  training:
    model: $4
    data: $5
    optimizer: {type: adamw, lr: 0.001, weightDecay: 0.1}
    gradClip: 1.0
    batchSizePerWorker: $6
    epochs: 100
    maxSteps: $7
    evalEverySteps: 0
EOF
}
run() { # NAME: ringmaster run, then its phase
  local t0=$SECONDS
  "$RM_BIN/ringmaster" run -f "$logs/$1.yaml" --checkpoint-dir "$logs/ck-$1" --run-dir "$logs/run-$1" -o json \
    >"$logs/$1.json" 2>"$logs/$1.err"
  local rc=$?
  local ph
  ph=$(tail -n 1 "$logs/$1.json" 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["status"]["phase"])' 2>/dev/null)
  echo "$1: rc=$rc phase=${ph:-?} in $((SECONDS - t0)) s"
  [ "$ph" = Succeeded ] || { fail=1; tail -n 5 "$logs/$1.err"; tail -n 5 "$logs"/run-$1/worker-0.log 2>/dev/null; }
}

# ---- 1. T = 1, 2, 4 reach the same parameters (exact fp32) --------------------------------------
small='{type: gpt, layers: 2, heads: 4, embed: 128, context: 64, vocab: 256}'
text='{uri: "builtin:tinyshakespeare", format: text, validation: {fraction: 0.02}}'
export RM_CUDA_TF32=0
for job in t1:1:1 t2:2:2 t4:4:4 d2:2:1 t2d2:4:2; do # NAME:REPLICAS:T
  IFS=: read -r name reps T <<<"$job"
  mk "$name" "$reps" "$T" "$small" "$text" 8 40
  run "$name"
done
unset RM_CUDA_TF32
for pair in t2:t1 t4:t1 t2d2:d2; do
  a=${pair%:*} b=${pair#*:}
  out=$("$PY" tests/e2e/compare-safetensors.py "$logs/ck-$a/export/model.safetensors" \
        "$logs/ck-$b/export/model.safetensors" 1e-3 2>&1)
  rc=$?
  [ $rc = 0 ] || fail=1
  echo "RESULT kind=tensor-gpu-parity job=$a vs=$b steps=40 ok=$([ $rc = 0 ] && echo 1 || echo 0) $(echo "$out" | tail -n 1 | tr ' ' '_')"
done
grep -h 'msg="round ready"' "$logs"/run-d2/worker-1.log | tail -n 1
grep -h 'msg="tensor round"' "$logs"/run-t2/worker-1.log | tail -n 1
grep -h 'msg="tensor stats"' "$logs"/run-t2/worker-0.log | tail -n 1
[ "${TENSOR_SMALL:-0}" = 1 ] && exit $fail

# ---- 2. GPT-2 124M's shapes: memory per rank, T = 1 and T = 2 ------------------------------------
data=/tmp/rm-tensor-data
mkdir -p "$data"
"$PY" - "$data" <<'PY' || { echo "FAIL writing the token shards"; exit 1; }
import sys
import numpy as np
rng = np.random.default_rng(7)
for name, n in (("train.bin", 1_000_000), ("val.bin", 50_000)):
    toks = rng.integers(0, 50257, n, dtype=np.uint16)
    hdr = np.zeros(256, dtype=np.int32); hdr[0], hdr[1], hdr[2] = 20240520, 1, n
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(hdr.tobytes()); f.write(toks.tobytes())
PY
big='{type: gpt, layers: 12, heads: 12, embed: 768, context: 1024, vocab: 50257}'
for T in 1 2; do
  mk "g$T" "$T" "$T" "$big" "{uri: $data/train.bin, format: tokens, validation: {fraction: 0.01}}" 8 20
  peak=$logs/g$T-gpumem.txt
  : >"$peak"
  ( while sleep 0.5; do nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >>"$peak" 2>/dev/null; done ) &
  sampler=$!
  run "g$T"
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  gpu=$(sort -t, -k2 -n "$peak" | awk -F, '{m[$1]=$2} END {for (p in m) print m[p]}' | sort -n | tail -n 1)
  mem=$(grep -h 'msg="memory"' "$logs"/run-g$T/worker-0.log | tail -n 1)
  pb=$(echo "$mem" | grep -o 'params_bytes=[0-9]*' | cut -d= -f2)
  ob=$(echo "$mem" | grep -o 'optimizer_bytes=[0-9]*' | cut -d= -f2)
  tps=$(grep -h 'tokens_per_s=' "$logs"/run-g$T/worker-0.log | tail -n 2 | head -n 1 | grep -o 'tokens_per_s=[0-9]*' | cut -d= -f2)
  echo "RESULT kind=tensor-gpu-memory model=gpt2-124m T=$T params_bytes=${pb:-?} optimizer_bytes=${ob:-?} gpu_mib_per_process=${gpu:-?} tokens_per_s=${tps:-?}"
done
grep -h 'msg="tensor stats"' "$logs"/run-g2/worker-0.log | tail -n 1
exit $fail
