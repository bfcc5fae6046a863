#!/usr/bin/env bash
# bench/data/run.sh — the data-loading cost of a training step against the step time, for both
# dataset formats (docs/models-and-data.md, "The data-reader interface"; target: under 2% of the
# step). The data phase is timed alone by bench/data/data_cost.c through the worker's own reader
# (the rank's rows gathered from the epoch's permutation, plus the permutation and set_epoch spread
# over the epoch's steps); the step time is `ringmaster run`'s on the same spec and batch (one
# worker: 1 / steps per second from status.result), which includes that data phase, so the share
# is data / step. Formats: IDX (the built-in Fashion-MNIST, the MLP [512, 256], batch 64) and token
# shards (tinyshakespeare through `ringmaster tokenize`, nanoGPT's CPU baby GPT, batch 12).
# STEPS (default 300: the run's steps; the data phase is timed over 20x as many), RUNS (3: best).
# Writes bench/results/data.md (DATA_OUT overrides).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$ROOT/bin}
PY=/usr/bin/python3
STEPS=${STEPS:-300}
RUNS=${RUNS:-3}
OUT=${DATA_OUT:-$ROOT/bench/results/data.md}
B=$ROOT/build/release
T=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-data.XXXXXX")
trap 'rm -rf "$T"' EXIT
export RINGMASTER_DATASETS="$ROOT/datasets"
for o in data idx reader stream; do
  [ -f "$B/worker/data/$o.o" ] || { echo "bench/data: no $B/worker/data/$o.o: run make first"; exit 1; }
done
cc -std=c11 -D_GNU_SOURCE -O2 -I"$ROOT" -pthread -o "$T/data_cost" "$ROOT/bench/data/data_cost.c" \
  "$B"/worker/data/{data,idx,reader,stream}.o "$B/libcommon.a" -lcurl -lcjson -lmicrohttpd -lyaml -lz -lm
"$BIN/ringmaster" tokenize --name tiny "$ROOT/datasets/tinyshakespeare/input.txt" "$T/tok" >/dev/null

IDX_MODEL='{"type": "mlp", "hidden": [512, 256]}'
IDX_DATA='{"uri": "builtin:fashion-mnist"}'
TOK_MODEL='{"type": "gpt", "layers": 4, "heads": 4, "embed": 128, "context": 64, "vocab": 256}'
TOK_DATA="{\"uri\": \"$T/tok\", \"format\": \"tokens\"}"

# step_s NAME MODEL DATA BATCH: seconds per step of a one-worker run (best of RUNS)
step_s() {
  local best="" r
  cat >"$T/$1.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: bench-data-$1}
spec:
  replicas: 1
  backend: ring
  training:
    model: $2
    data: $3
    optimizer: {type: adamw, lr: 0.001}
    batchSizePerWorker: $4
    epochs: 1000
    maxSteps: $STEPS
YAML
  for _ in $(seq 1 "$RUNS"); do
    rm -rf "$T/ck-$1" "$T/run-$1"
    "$BIN/ringmaster" run -f "$T/$1.yaml" --checkpoint-dir "$T/ck-$1" --run-dir "$T/run-$1" -o json \
      >"$T/$1.json" 2>"$T/$1.err" || { tail -5 "$T/$1.err"; exit 1; }
    r=$($PY -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1])["status"]["result"]; print(int(sys.argv[2]) / r["samplesPerSecond"])' "$T/$1.json" "$4")
    best=$($PY -c "print(min(float('${best:-1e9}'), $r))")
  done
  echo "$best"
}
# data_s MODEL DATA BATCH: the data phase's seconds per step (best of RUNS)
data_s() {
  local best="" r
  for _ in $(seq 1 "$RUNS"); do
    r=$("$T/data_cost" "{\"model\": $1, \"data\": $2}" "$3" $((STEPS * 20)) | $PY -c 'import json,sys; print(json.load(sys.stdin)["per_step_s"])')
    best=$($PY -c "print(min(float('${best:-1e9}'), $r))")
  done
  echo "$best"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
d_idx=$(data_s "$IDX_MODEL" "$IDX_DATA" 64); s_idx=$(step_s idx "$IDX_MODEL" "$IDX_DATA" 64)
d_tok=$(data_s "$TOK_MODEL" "$TOK_DATA" 12); s_tok=$(step_s tok "$TOK_MODEL" "$TOK_DATA" 12)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
$PY - "$OUT" "$STEPS" "$RUNS" "$load0" "$load1" "$(nproc)" "$d_idx" "$s_idx" "$d_tok" "$s_tok" <<'PY'
import sys, datetime
out, steps, runs, l0, l1, ncpu = sys.argv[1:7]
d_idx, s_idx, d_tok, s_tok = map(float, sys.argv[7:11])
rows = [("idx: Fashion-MNIST (60,000 images)", "MLP [784, 512, 256, 10]", 64, d_idx, s_idx),
        ("tokens: tinyshakespeare shards", "GPT 4 x 128, context 64", 12, d_tok, s_tok)]
L = ["## Data loading per step", "",
     f"`bench/data/run.sh` ({datetime.date.today()}): the data phase of a step (the rank's rows gathered "
     f"from the epoch's permutation through the worker's reader, plus the permutation and set_epoch spread "
     f"over the epoch; `bench/data/data_cost.c`) against one worker's step time under `ringmaster run` "
     f"({steps} steps), best of {runs}; {ncpu} CPUs, load average {l0} at the start, {l1} at the end. "
     f"Target: under 2% of the step.", "",
     "| format | model | batch | data per step (ms) | step (ms) | share | under 2% |", "|---|---|---|---|---|---|---|"]
for name, model, b, d, s in rows:
    share = d / s
    L.append(f"| {name} | {model} | {b} | {d * 1e3:.3f} | {s * 1e3:.2f} | {share * 100:.2f}% | {'yes' if share < 0.02 else 'NO'} |")
L.append("")
L.append("The step time is the run's (status.result.samplesPerSecond: start-up and the final evaluation "
         "included, so it errs long at few steps); it includes its own data phase, so the share is what a "
         "step would save without it.")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
