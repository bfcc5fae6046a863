#!/usr/bin/env bash
# bench/ps/anchor.sh — ringmaster's synchronous parameter servers (b = 0) beside PyTorch's own
# parameter-server style (bench/ps/torch_rpc_ps.py: torch.distributed.rpc, a server holding the
# model, the batch-update tutorial's server), one after the other on this machine: the same MLP,
# per-worker batch, optimizer, learning-rate rule and epochs. Prints (and writes to OUT) a markdown
# table: samples/s over all workers, wall seconds, test accuracy.
# Knobs (env): WORKERS (2), SERVERS (1), EPOCHS (1), HIDDEN ("512, 256"), BATCH (64),
# MAX_SECONDS (600, the PyTorch peer's cap), OUT (bench/results/ps-anchor.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$root/bin}
WORKERS=${WORKERS:-2} SERVERS=${SERVERS:-1} EPOCHS=${EPOCHS:-1} HIDDEN=${HIDDEN:-512, 256}
BATCH=${BATCH:-64} MAX_SECONDS=${MAX_SECONDS:-600} OUT=${OUT:-$root/bench/results/ps-anchor.md}
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-ps-anchor.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat > "$work/job.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: anchor}
spec:
  replicas: $WORKERS
  strategy: parameterServer
  parameterServer: {replicas: $SERVERS, mode: sync, backupWorkers: 0}
  checkpoint: {intervalSteps: 100000}
  training:
    model: {type: mlp, hidden: [$HIDDEN]}
    epochs: $EPOCHS
    batchSizePerWorker: $BATCH
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 1
    schedule: cosine
YAML
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s.%N)
"$BIN/ringmaster" run -f "$work/job.yaml" -o json --checkpoint-dir "$work/ck" --run-dir "$work/run" \
  > "$work/rm.out" 2> "$work/rm.err" || { echo "anchor: ringmaster run failed:" >&2; tail -20 "$work/rm.err" >&2; exit 1; }
t1=$(date +%s.%N)
rm_row=$(python3 - "$work/rm.out" "$t0" "$t1" <<'PY'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); r = j["status"].get("result", {})
print(f"| ringmaster sync PS b=0 | {r.get('samplesPerSecond', 0):.0f} | {float(sys.argv[3]) - float(sys.argv[2]):.1f} | {r.get('testAccuracy', float('nan')):.4f} | {r.get('steps', 0)} |")
PY
)
/usr/bin/python3 "$root/bench/ps/torch_rpc_ps.py" --world "$WORKERS" --epochs "$EPOCHS" --batch "$BATCH" \
  --hidden "${HIDDEN// /}" --max-seconds "$MAX_SECONDS" > "$work/torch.out" 2> "$work/torch.err" \
  || { echo "anchor: the PyTorch peer failed (python3-torch comes with make deps-bench):" >&2
       tail -20 "$work/torch.err" >&2; exit 1; }
torch_row=$(python3 - "$work/torch.out" <<'PY'
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
cut = " (stopped at its time cap)" if j["steps"] < 60000 // (j["world"] * 64) * j["epochs"] else ""
print(f"| torch.distributed.rpc PS (batch update){cut} | {j['samples_per_second']:.0f} | {j['seconds']:.1f} | {j['test_accuracy']:.4f} | {j['steps']} |")
PY
)
{
  echo "## Parameter servers beside torch.distributed.rpc"
  echo
  echo "\`bench/ps/anchor.sh\` on $(hostname) ($(nproc) CPUs), $(date -u +%Y-%m-%d); load average $load0 at the"
  echo "start, $(cut -d' ' -f1-3 /proc/loadavg) at the end. $WORKERS workers, $SERVERS server(s), MLP [$HIDDEN],"
  echo "$EPOCHS epoch(s), batch $BATCH per worker, SGD momentum 0.9; ringmaster's samples/s is its steady rate"
  echo "(status.result), PyTorch's the rate after its first 20 steps; wall seconds include start-up."
  echo
  echo "| peer | samples/s (all workers) | wall s | test accuracy | steps |"
  echo "|---|---|---|---|---|"
  echo "$rm_row"
  echo "$torch_row"
} | tee "$OUT"
