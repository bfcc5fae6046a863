#!/usr/bin/env bash
# bench/pipeline/run.sh — issue 15: pipeline stages, GPipe against 1F1B.
#  For P = 2 stages and M = 1, 4, 8 micro-batches on a deep MLP (8 hidden layers of 1024, batch 64
#  per replica): each stage's measured bubble (time waiting for a neighbour / time of the
#  micro-batch schedule, averaged over the run after its first step) beside the textbook
#  (P-1)/(M+P-1), the schedule's time per step, and the stage's peak live activation bytes (in-flight
#  micro-batches x the stage's layer outputs per micro-batch: 1F1B bounds them by P-p, GPipe keeps M).
#  Jobs run through `ringmaster run` (2 worker processes on this machine, a rendezvous, the ring
#  sub-groups of step_pipeline.c).
#  Anchor: PyTorch 1.13's torch.distributed.pipeline.sync.Pipe (GPipe, one process, both partitions
#  on the CPU, chunks = M) on the same model: step time (ANCHOR=0 skips it).
# Prints its table (`make bench` keeps it in bench/results/raw/pipeline.txt; OUT=FILE also writes it
# there); bench/results/pipeline.md is the curated section BENCHMARKS.md is assembled from. Raw logs
# in $RAW (default a temp dir, removed).
# QUICK=1: a smoke run (10 steps per point). STEPS=N, MS="1 4 8", PS="2" adjust a run.
# RM_BIN (default ./bin) must hold ringmaster. Runs alone; run it inside `unshare -n` on a shared
# machine (it listens on loopback ports).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
RMB="${RM_BIN:-$root/bin}"
OUT="${OUT:-}"
py=/usr/bin/python3
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-pipe.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
cleanup() { [ "$keep_raw" = 1 ] || rm -rf "$RAW"; }
trap cleanup EXIT
[ -x "$RMB/ringmaster" ] || { echo "no $RMB/ringmaster: build first (make)"; exit 1; }
QUICK="${QUICK:-0}"
STEPS="${STEPS:-$([ "$QUICK" = 1 ] && echo 10 || echo 60)}"
read -r -a MS <<< "${MS:-1 4 8}"
read -r -a PS <<< "${PS:-2}"
ANCHOR="${ANCHOR:-1}"

manifest() {   # NAME P M SCHEDULE
  cat > "$RAW/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  backend: ring
  restartPolicy: {maxRestarts: 0, progressDeadlineSeconds: 300}
  checkpoint: {intervalSteps: 1000000}
  parallelism: {pipelineStages: $2, microBatches: $3, schedule: $4}
  training:
    model: {type: mlp, hidden: [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024]}
    epochs: 1
    maxSteps: $STEPS
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.005, momentum: 0.9}
    warmupEpochs: 0
EOF
}

rows=()
for P in "${PS[@]}"; do
  for M in "${MS[@]}"; do
    for S in gpipe 1f1b; do
      n="p$P-m$M-$S"
      manifest "$n" "$P" "$M" "$S"
      echo "== $n ($STEPS steps)" >&2
      "$RMB/ringmaster" run -f "$RAW/$n.yaml" --checkpoint-dir "$RAW/ck-$n" --run-dir "$RAW/run-$n" \
        >"$RAW/$n.out" 2>"$RAW/$n.err" || { echo "$n failed: $(tail -3 "$RAW/$n.err")" >&2; continue; }
      for f in "$RAW"/run-"$n"/worker-*.log; do
        l=$(grep -h 'msg="pipeline stats"' "$f" | tail -1 || true)
        [ -n "$l" ] || continue
        rows+=("$($py - "$l" <<'PY'
import re, sys
kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', sys.argv[1]))
print("| %s | %s | %s | %s | %.3f | %.3f | %.1f | %.1f |" % (
    kv["stages"], kv["micro_batches"], kv["schedule"], kv["stage"], float(kv["bubble"]),
    float(kv["textbook_bubble"]), float(kv["schedule_ms"]), int(kv["activations_bytes"]) / 1024))
PY
)")
      done
    done
  done
done

anchor=""
if [ "$ANCHOR" = 1 ]; then
  for M in "${MS[@]}"; do
    cat > "$RAW/pipe_anchor.py" <<'PY'
import os, sys, time, torch, torch.nn as nn
import torch.distributed.rpc as rpc
from torch.distributed.pipeline.sync import Pipe
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
rpc.init_rpc("worker", rank=0, world_size=1)
torch.manual_seed(0); torch.set_num_threads(1)
M, steps = int(sys.argv[1]), int(sys.argv[2])
def blk(i, o, relu=True): return nn.Sequential(nn.Linear(i, o), nn.ReLU()) if relu else nn.Linear(i, o)
s0 = nn.Sequential(blk(784, 1024), *[blk(1024, 1024) for _ in range(4)])
s1 = nn.Sequential(*[blk(1024, 1024) for _ in range(3)], blk(1024, 10, relu=False))
model = Pipe(nn.Sequential(s0, s1), chunks=M)
opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
x = torch.randn(64, 784); y = torch.randint(0, 10, (64,))
ts = []
for it in range(steps + 1):
    t = time.time()
    loss = nn.functional.cross_entropy(model(x).local_value(), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if it: ts.append(time.time() - t)
ts.sort()
print("ANCHOR M=%d step_ms_median=%.1f" % (M, 1e3 * ts[len(ts) // 2]))
rpc.shutdown()
PY
    a=$(timeout 600 $py "$RAW/pipe_anchor.py" "$M" "$([ "$QUICK" = 1 ] && echo 3 || echo 10)" 2>/dev/null | grep ANCHOR || echo "ANCHOR M=$M failed")
    anchor+="- torch.distributed.pipeline.sync.Pipe (1 process, CPU, 2 partitions, chunks=$M): ${a#ANCHOR M=$M }"$'\n'
  done
fi

{
  echo "# Pipeline stages: GPipe vs 1F1B (issue 15)"
  echo
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Date: $(date -u +%Y-%m-%dT%H:%MZ). Command: \`QUICK=$QUICK STEPS=$STEPS bench/pipeline/run.sh\`."
  echo "Model: MLP 784-8x1024-10 (SGD), batch 64 per replica, $STEPS steps per point, \`ringmaster run\` with P workers."
  echo
  echo "| P | M | schedule | stage | measured bubble | textbook (P-1)/(M+P-1) | schedule ms/step | peak live activations KiB |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  [ -n "$anchor" ] && { echo "Anchor:"; echo; printf '%s' "$anchor"; echo; }
  echo "The measured bubble is each stage's time waiting for its neighbour over the time of its"
  echo "micro-batch schedule (ringmaster_worker_pipeline_bubble_ratio, averaged over the run after the"
  echo "first step). Peak live activations: in-flight micro-batches x the stage's layer outputs (and"
  echo "received inputs) per micro-batch."
} > "$RAW/table.md"
cat "$RAW/table.md"
[ -z "$OUT" ] || cp "$RAW/table.md" "$OUT"
