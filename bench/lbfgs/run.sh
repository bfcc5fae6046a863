#!/usr/bin/env bash
# bench/lbfgs/run.sh — Sandblaster L-BFGS (docs/strategies.md#sandblaster-l-bfgs) with `ringmaster run`
# on this machine:
#  1. training loss per pass over the data (and wall time) for ringmaster's L-BFGS (WORKERS workers,
#     SERVERS shards, PORTIONS portions, history 10, Armijo; every line-search trial is a pass),
#     beside the PyTorch anchors of bench/lbfgs/peers.py on the same model and data: full-batch
#     gradient descent, synchronous minibatch SGD (a pass = an epoch) and torch.optim.LBFGS (full
#     batch, strong Wolfe);
#  2. the straggler experiment: one worker slowed FACTOR x (slow:rank=1:factor=F) — mean pass time
#     with on-demand portions vs an equal static split (RINGMASTER_LBFGS_STATIC_SPLIT=1: portion i
#     to worker i % N, no reissue), against the no-straggler pass time.
# Results: a markdown report at OUT (bench/results/lbfgs.md) and the per-pass CSV beside it.
# Knobs (env): WORKERS (4), SERVERS (2), PASSES (50), HIDDEN (128), BATCH (250), PORTIONS (32),
# FACTOR (4), PEERS (1: run the PyTorch anchors), OUT. A smoke run: PASSES=4 PEERS=0.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$root/bin}
WORKERS=${WORKERS:-4} SERVERS=${SERVERS:-2} PASSES=${PASSES:-50} HIDDEN=${HIDDEN:-128}
BATCH=${BATCH:-250} PORTIONS=${PORTIONS:-32} FACTOR=${FACTOR:-4} PEERS=${PEERS:-1}
OUT=${OUT:-$root/bench/results/lbfgs.md}
CSV=${OUT%.md}.csv
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-lbfgs.XXXXXX")
trap 'rm -rf "$work"' EXIT

job() {  # job NAME PORTIONS -> $work/NAME.yaml
  cat >"$work/$1.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: lbfgs-$1}
spec:
  replicas: $WORKERS
  strategy: parameterServer
  parameterServer: {replicas: $SERVERS, mode: sync}
  restartPolicy: {maxRestarts: 2, progressDeadlineSeconds: 300}
  training:
    model: {type: mlp, hidden: [$HIDDEN]}
    epochs: $PASSES
    batchSizePerWorker: $BATCH
    optimizer: {type: lbfgs, history: 10, portions: $2, lineSearch: armijo, lr: 1}
YAML
}
run() {  # run NAME PORTIONS [env...]: the job; prints "mean_pass_seconds"
  local name=$1 p=$2; shift 2
  job "$name" "$p"
  env "$@" "$BIN/ringmaster" run -f "$work/$name.yaml" -o json --checkpoint-dir "$work/ck-$name" \
      --run-dir "$work/run-$name" >"$work/$name.out" 2>"$work/$name.err" ||
    { tail -n 30 "$work/$name.err" "$work/run-$name"/ps-0.log >&2; echo "job $name failed" >&2; exit 1; }
  sed -n 's/.*msg="lbfgs pass done" pass=\([0-9]*\) .* loss=\([0-9.]*\) seconds=\([0-9.]*\).*/\1 \2 \3/p' \
      "$work/run-$name/ps-0.log" >"$work/$name.passes"
}
mean_pass() {  # the mean pass time, the first pass (start-up, data loading) left out
  awk 'NR > 1 {s += $3; n++} END {printf "%.3f", n ? s / n : 0}' "$work/$1.passes"
}

echo "method,pass,loss,seconds" >"$CSV"
run ondemand "$PORTIONS"
awk '{t += $3; printf "ringmaster-lbfgs,%d,%s,%.3f\n", $1, $2, t}' "$work/ondemand.passes" >>"$CSV"
run slow-ondemand "$PORTIONS" RINGMASTER_FAULT="slow:rank=1:factor=$FACTOR"
run slow-static "$PORTIONS" RINGMASTER_FAULT="slow:rank=1:factor=$FACTOR" RINGMASTER_LBFGS_STATIC_SPLIT=1
full=$(sed -n 's/.*full_batch=\([0-9]*\).*/\1/p' "$work/run-ondemand/ps-0.log" | head -n 1)
if [ "$PEERS" = 1 ]; then
  /usr/bin/python3 "$root/bench/lbfgs/peers.py" "$PASSES" "$HIDDEN" "$full" 1 | sed 's/^/torch-/' >>"$CSV"
fi
base=$(mean_pass ondemand) od=$(mean_pass slow-ondemand) st=$(mean_pass slow-static)
loss_at() {  # loss_at METHOD PASS
  awk -F, -v m="$1" -v p="$2" '$1 == m && $2 == p {print $3}' "$CSV"
}
{
  echo "# Sandblaster L-BFGS (bench/lbfgs/run.sh)"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg);"
  echo "$WORKERS workers, $SERVERS servers, MLP 784-$HIDDEN-10, full batch $full samples, $PORTIONS portions, $PASSES passes."
  echo
  echo "| method | loss after pass 1 | pass $((PASSES / 2)) | pass $((PASSES - 1)) |"
  echo "|---|---|---|---|"
  for m in ringmaster-lbfgs torch-gd torch-sgd torch-lbfgs; do
    grep -q "^$m," "$CSV" || continue
    echo "| $m | $(loss_at $m 1) | $(loss_at $m $((PASSES / 2))) | $(loss_at $m $((PASSES - 1))) |"
  done
  echo
  echo "| straggler (rank 1 slowed ${FACTOR}x) | mean pass seconds | vs no straggler |"
  echo "|---|---|---|"
  echo "| none, on-demand portions | $base | 1.00 |"
  awk -v a="$od" -v b="$base" 'BEGIN {printf "| slowed, on-demand portions | %s | %.2f |\n", a, (b > 0 ? a / b : 0)}'
  awk -v a="$st" -v b="$base" 'BEGIN {printf "| slowed, equal static split | %s | %.2f |\n", a, (b > 0 ? a / b : 0)}'
} | tee "$OUT"
