#!/usr/bin/env bash
# bench/pipeline/run.sh — pipeline stages (docs/strategies.md#pipeline-stages), GPipe against 1F1B, and
# the 2x2 grid against 4-way data parallelism.
#
# The full run, on an idle machine (>= 4 CPUs; P = 4 runs 4 worker processes), one command from the
# repository root after `make`:
#     unshare -n sh -c 'ip link set lo up; OUT=bench/results/raw/pipeline.txt bench/pipeline/run.sh'
# (`unshare -n` only isolates its loopback ports; without it the ports are the host's.) See
# bench/notes/pipeline.md for how long it takes. `make bench` runs it too (bench/run-all.sh).
#
# Part 1: for P = 2, 4 stages and M = 1, 4, 8, 16 micro-batches, GPipe and 1F1B, on a deep MLP
#  (8 hidden layers of 1024, batch 64 per replica): each stage's measured bubble (time waiting for a
#  neighbour / time of the micro-batch schedule, averaged over the run after its first step; the
#  ringmaster_worker_pipeline_bubble_ratio gauge) beside the textbook (P-1)/(M+P-1), the schedule's
#  time per step, the stage's peak live activation bytes (in-flight micro-batches x the stage's
#  layer outputs per micro-batch: 1F1B bounds them by P-p, GPipe keeps M) and the parameter bytes
#  the stage holds (ringmaster_worker_memory_bytes{kind=params}: its own layers only).
# Part 2: the 2-D grid (P = 2 stages x D = 2 replicas, 1F1B, M = 8) against pure data parallelism
#  with 4 workers (allreduce) on the same model and the same global batch (256): throughput
#  (global samples/s over the slowest worker's training time) and per-worker parameter, gradient and
#  optimizer bytes.
#  Jobs run through `ringmaster run` (worker processes on this machine, a rendezvous, the ring
#  sub-groups of step_pipeline.c).
#  Anchor: PyTorch 1.13's torch.distributed.pipeline.sync.Pipe (GPipe, one process, both partitions
#  on the CPU, chunks = M) on the same model: step time (ANCHOR=0 skips it).
# Prints its table (OUT=FILE also writes it there; `make bench` keeps it in
# bench/results/raw/pipeline.txt); bench/notes/pipeline.md is the curated section BENCHMARKS.md is
# assembled from. Raw logs in $RAW (default a temp dir, removed).
# QUICK=1: a smoke run (10 steps per point, P = 2, M = 1 4 8). STEPS=N, MS="1 4 8 16", PS="2 4",
# GRID=0 (skip part 2) adjust a run.
# CPUCAP=X (default 0.45 where bench/lib/cpucap.sh finds a writable cgroup cpu controller, else off;
#  CPUCAP=0 turns it off): every worker process runs under a CPU cap of X CPUs of its own, one
#  emulated machine per stage, as the textbook assumes (a stage that waits leaves its cycles idle
#  instead of lending them to its neighbour; P = 4 on a 2-core machine measures the schedule, not the
#  fight for cores). Keep P x X below the cores: 0.45 x 4 = 1.8 on 2 cores. The caps are printed.
# Beside the textbook (equal stages) the table gives the bubble the same schedule has with this
# run's measured stage times: stage p's forward and backward busy time per micro-batch (tf_p, tb_p,
# waits excluded) give a makespan of sum_p(tf_p + tb_p) + (M-1) * max_p(tf_p + tb_p) (1F1B; GPipe
# sum_p(tf_p + tb_p) + (M-1) * (max_p tf_p + max_p tb_p)), and stage p idles 1 - M(tf_p + tb_p) /
# makespan of it: the textbook again when the stages are equal, and the share of a stage's wait that
# is the layer split's imbalance (the slowest stage paces the others) rather than the schedule.
# RM_BIN (default ./bin) must hold ringmaster.
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
T0=$(date +%s)
QUICK="${QUICK:-0}"
STEPS="${STEPS:-$([ "$QUICK" = 1 ] && echo 10 || echo 60)}"
read -r -a MS <<< "${MS:-$([ "$QUICK" = 1 ] && echo "1 4 8" || echo "1 4 8 16")}"
read -r -a PS <<< "${PS:-$([ "$QUICK" = 1 ] && echo "2" || echo "2 4")}"
ANCHOR="${ANCHOR:-1}"
GRID="${GRID:-1}"
# shellcheck source=bench/lib/cpucap.sh
. "$root/bench/lib/cpucap.sh"
CPUCAP="${CPUCAP:-$(cpucap_available && echo 0.45 || echo 0)}"
capnote="none (CPUCAP=0: the P workers share this machine's $(nproc) CPUs)"
if [ "$CPUCAP" != 0 ]; then
  export BIN="$RMB"
  cpucap_start "$CPUCAP"
  trap 'cpucap_stop; cleanup' EXIT
  capnote="$CPUCAP CPU per worker process (its own cgroup CFS quota, bench/lib/cpucap.sh): P = 4 uses $($py -c "print(round(4 * $CPUCAP, 2))") of $(nproc) CPUs"
fi
echo "CPU caps: $capnote" >&2

manifest() {   # NAME REPLICAS P M SCHEDULE BATCH (P = 0: no spec.parallelism, the allreduce strategy)
  local par=""
  [ "$3" = 0 ] || par="  parallelism: {pipelineStages: $3, microBatches: $4, schedule: $5}"
  cat > "$RAW/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  backend: ring
  restartPolicy: {maxRestarts: 0, progressDeadlineSeconds: 300}
  checkpoint: {intervalSteps: 1000000}
$par
  training:
    model: {type: mlp, hidden: [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024]}
    epochs: 1
    maxSteps: $STEPS
    batchSizePerWorker: $6
    optimizer: {type: sgd, lr: 0.005, momentum: 0.9}
    warmupEpochs: 0
EOF
}

# kv LINE KEY: a key=value of a log line
kv() { printf '%s\n' "$1" | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2; }

rows=()
for P in "${PS[@]}"; do
  for M in "${MS[@]}"; do
    for S in gpipe 1f1b; do
      n="p$P-m$M-$S"
      manifest "$n" "$P" "$P" "$M" "$S" 64
      echo "== $n ($STEPS steps)" >&2
      "$RMB/ringmaster" run -f "$RAW/$n.yaml" --checkpoint-dir "$RAW/ck-$n" --run-dir "$RAW/run-$n" \
        >"$RAW/$n.out" 2>"$RAW/$n.err" || { echo "$n failed: $(tail -3 "$RAW/$n.err")" >&2; continue; }
      lines=()
      for f in "$RAW"/run-"$n"/worker-*.log; do
        l=$(grep -h 'msg="pipeline stats"' "$f" | tail -1 || true)
        [ -n "$l" ] || continue
        pb=$(kv "$(grep -h 'msg="memory"' "$f" | tail -1 || true)" params_bytes)
        lines+=("$l params_bytes=${pb:-0}")
      done
      [ "${#lines[@]}" -gt 0 ] || continue
      while IFS= read -r row; do rows+=("$row"); done < <($py - "${lines[@]}" <<'PY'
import re, sys
st = [dict(re.findall(r'(\w+)=("[^"]*"|\S+)', a)) for a in sys.argv[1:]]
st.sort(key=lambda k: int(k["stage"]))
M = int(st[0]["micro_batches"])
tf = [float(k["fwd_ms"]) / M for k in st]
tb = [float(k["bwd_ms"]) / M for k in st]
t = [a + b for a, b in zip(tf, tb)]
if st[0]["schedule"] == "gpipe":
    span = sum(t) + (M - 1) * (max(tf) + max(tb))
else:
    span = sum(t) + (M - 1) * max(t)
for k, tp in zip(st, t):
    pred = 1 - M * tp / span if span > 0 else 0
    meas = float(k["bubble"])
    print("| %s | %s | %s | %s | %.3f | %.3f | %.3f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
        k["stages"], k["micro_batches"], k["schedule"], k["stage"], meas,
        float(k["textbook_bubble"]), pred, meas / pred if pred > 0 else 0,
        float(k["schedule_ms"]), M * tp, float(k.get("cycle_ms", 0)),
        int(k["activations_bytes"]) / 1024, int(k["params_bytes"]) / 2**20))
PY
)
    done
  done
done

# ---- part 2: the 2x2 grid against 4-way data parallelism, global batch 256 either way
grid=()
if [ "$GRID" = 1 ]; then
  manifest grid 4 2 8 1f1b 128   # 2 stages x 2 replicas, 128 rows per replica
  manifest dp4 4 0 1 none 64     # 4 data-parallel workers x 64
  for n in grid dp4; do
    echo "== $n ($STEPS steps)" >&2
    "$RMB/ringmaster" run -f "$RAW/$n.yaml" --checkpoint-dir "$RAW/ck-$n" --run-dir "$RAW/run-$n" \
      >"$RAW/$n.out" 2>"$RAW/$n.err" || { echo "$n failed: $(tail -3 "$RAW/$n.err")" >&2; continue; }
    secs=0; pmax=0; gmax=0; omax=0; steps=0
    for f in "$RAW"/run-"$n"/worker-*.log; do
      d=$(grep -h 'msg="training done"' "$f" | tail -1 || true)
      m=$(grep -h 'msg="memory"' "$f" | tail -1 || true)
      [ -n "$d" ] && [ -n "$m" ] || continue
      steps=$(kv "$d" steps)
      secs=$($py -c "print(max($secs, $(kv "$d" seconds)))")
      pmax=$($py -c "print(max($pmax, $(kv "$m" params_bytes)))")
      gmax=$($py -c "print(max($gmax, $(kv "$m" grads_bytes)))")
      omax=$($py -c "print(max($omax, $(kv "$m" optimizer_bytes)))")
    done
    label="D = 4 (allreduce)"
    [ "$n" = grid ] && label="P = 2 x D = 2 (1F1B, M = 8)"
    grid+=("$($py -c "
s, st = $secs, $steps
print('| $label | %s | %.0f | %.1f | %.1f | %.1f |' % (st, 256 * st / s if s > 0 else 0,
      $pmax / 2**20, $gmax / 2**20, $omax / 2**20))")")
  done
fi

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
  echo "# Pipeline stages: GPipe vs 1F1B"
  echo
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Date: $(date -u +%Y-%m-%dT%H:%MZ). Command: \`QUICK=$QUICK STEPS=$STEPS PS=\"${PS[*]}\" MS=\"${MS[*]}\" bench/pipeline/run.sh\`. Took $(( $(date +%s) - T0 )) s."
  echo "Model: MLP 784-8x1024-10 (SGD), batch 64 per replica, $STEPS steps per point, \`ringmaster run\` with P workers."
  echo "CPU caps: $capnote."
  echo
  echo "| P | M | schedule | stage | measured bubble | textbook (P-1)/(M+P-1) | textbook at these stage times | measured / stage-time textbook | schedule ms/step | busy ms/step | cycle ms/step | peak live activations KiB | params MiB (this stage) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  if [ "${#grid[@]}" -gt 0 ]; then
    echo "The 2-D grid against 4-way data parallelism (global batch 256, $STEPS steps; memory: the largest worker's):"
    echo
    echo "| layout | steps | samples/s | params MiB/worker | grads MiB/worker | optimizer MiB/worker |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${grid[@]}"
    echo
  fi
  [ -n "$anchor" ] && { echo "Anchor:"; echo; printf '%s' "$anchor"; echo; }
  echo "The measured bubble is each stage's time waiting for its neighbour over the time of its"
  echo "micro-batch schedule (ringmaster_worker_pipeline_bubble_ratio, averaged over the run after the"
  echo "first step). Textbook at these stage times: the same formula's generalisation to the stages'"
  echo "measured busy times (see the script's header); busy: the stage's forward and backward work and"
  echo "sends per step; cycle: from one step's schedule to the next (busy + waits + the optimizer, the"
  echo "allreduce and the driver). Peak live activations: in-flight micro-batches x the stage's layer"
  echo "outputs (and received inputs) per micro-batch."
} > "$RAW/table.md"
cat "$RAW/table.md"
[ -z "$OUT" ] || cp "$RAW/table.md" "$OUT"
