#!/usr/bin/env bash
# bench/ps/run.sh — the straggler experiment of issue 12 (../shared/docs/strategies.md): the same
# Fashion-MNIST job through the ring allreduce, synchronous parameter servers (b = 0 and b = 1
# backup workers) and asynchronous Downpour (s = 0 unbounded, s = 4), with no straggler, a
# persistent one (slow:rank=1:factor=4) and a transient one (slow only between two steps), all
# with `ringmaster run` one after the other on this machine. For each run: wall seconds, test
# accuracy, and the time to the target accuracy (from rank 0's first evaluation at or above it;
# "-" when never reached), written as a markdown table to bench/results/ps.md (and stdout).
#
# Knobs (env): WORKERS (4), SERVERS (1), EPOCHS (6), HIDDEN ("512, 256"), BATCH (64),
# TARGET (0.88), FACTOR (4), TRANSIENT ("100:400" = slow from step 100 to 400),
# VARIANTS ("ring sync-b0 sync-b1 async-s0 async-s4"), STRAGGLERS ("none persistent transient"),
# OUT (bench/results/ps.md), ANCHOR (1: then bench/ps/anchor.sh, the torch.distributed.rpc peer;
# 0: skip). A smoke run: EPOCHS=1 HIDDEN=128 VARIANTS="ring sync-b1" ANCHOR=0 ...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$root/bin}
WORKERS=${WORKERS:-4} SERVERS=${SERVERS:-1} EPOCHS=${EPOCHS:-6} HIDDEN=${HIDDEN:-512, 256}
BATCH=${BATCH:-64} TARGET=${TARGET:-0.88} FACTOR=${FACTOR:-4} TRANSIENT=${TRANSIENT:-100:400}
VARIANTS=${VARIANTS:-ring sync-b0 sync-b1 async-s0 async-s4}
STRAGGLERS=${STRAGGLERS:-none persistent transient}
OUT=${OUT:-$root/bench/results/ps.md}
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-ps.XXXXXX")
trap 'rm -rf "$work"' EXIT

strategy() {
  case $1 in
    ring) echo "  backend: ring";;
    sync-b0) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $SERVERS, mode: sync, backupWorkers: 0}";;
    sync-b1) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $SERVERS, mode: sync, backupWorkers: 1}";;
    async-s0) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $SERVERS, mode: async, stalenessBound: 0}";;
    async-s4) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $SERVERS, mode: async, stalenessBound: 4}";;
    *) echo "unknown variant $1" >&2; exit 2;;
  esac
}
optimizer() {  # Downpour used Adagrad; the synchronous variants the project's default SGD
  case $1 in async-*) echo "{type: adagrad, lr: 0.01}";; *) echo "{type: sgd, lr: 0.02, momentum: 0.9}";; esac
}
fault() {
  case $1 in
    none) echo "";;
    persistent) echo "slow:rank=1:factor=$FACTOR";;
    transient) echo "slow:rank=1:factor=$FACTOR:step=${TRANSIENT%%:*}:until=${TRANSIENT##*:}";;
  esac
}

rows=()
for st in $STRAGGLERS; do
  for v in $VARIANTS; do
    name="b-$v-$st"
    {
      echo "apiVersion: ringmaster.dev/v1alpha1"
      echo "kind: TrainingJob"
      echo "metadata: {name: b-${v//_/-}}"
      echo "spec:"
      echo "  replicas: $WORKERS"
      strategy "$v"
      echo "  restartPolicy: {maxRestarts: 2, progressDeadlineSeconds: 300}"
      echo "  checkpoint: {intervalSteps: 100000}"
      echo "  training:"
      echo "    model: {type: mlp, hidden: [$HIDDEN]}"
      echo "    epochs: $EPOCHS"
      echo "    batchSizePerWorker: $BATCH"
      echo "    optimizer: $(optimizer "$v")"
      echo "    warmupEpochs: 0"
    } > "$work/$name.yaml"
    f=$(fault "$st")
    echo "== $v, straggler $st ${f:+($f)}" >&2
    t0=$(date +%s.%N)
    set +e
    RINGMASTER_FAULT="$f" "$BIN/ringmaster" run -f "$work/$name.yaml" -o json \
        --checkpoint-dir "$work/ck-$name" --run-dir "$work/run-$name" > "$work/$name.out" 2> "$work/$name.err"
    rc=$?
    set -e
    t1=$(date +%s.%N)
    row=$(python3 - "$work/$name.out" "$work/run-$name/worker-0.log" "$t0" "$t1" "$TARGET" "$rc" <<'PY'
import json, re, sys, datetime
out, log, t0, t1, target, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
try:
    j = json.loads(open(out).read().strip().splitlines()[-1]); st = j["status"]
    phase, acc = st["phase"], st.get("result", {}).get("testAccuracy", float("nan"))
    steps = st.get("result", {}).get("steps", 0)
except Exception:
    phase, acc, steps = f"error rc={rc}", float("nan"), 0
tt = "-"
for line in open(log, errors="replace"):
    m = re.search(r'^ts=(\S+) .*msg="evaluation".*test_accuracy=([0-9.]+)', line)
    if m and float(m.group(2)) >= target:
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        tt = f"{t - t0:.1f}"; break
print(f"{phase} | {t1 - t0:.1f} | {tt} | {acc:.4f} | {steps}")
PY
)
    rows+=("| $st | $v | $row |")
    echo "   ${rows[-1]}" >&2
  done
done
{
  echo "## Parameter servers: the straggler experiment (issue 12)"
  echo
  echo "\`bench/ps/run.sh\` on $(hostname) ($(nproc) CPUs), $(date -u +%Y-%m-%d), load average at the end:"
  echo "$(cut -d' ' -f1-3 /proc/loadavg). Workers $WORKERS, servers $SERVERS, MLP [$HIDDEN], $EPOCHS epochs,"
  echo "batch $BATCH per worker, straggler rank 1 slowed ${FACTOR}x (transient: steps $TRANSIENT); time to $TARGET"
  echo "from the start of \`ringmaster run\` to rank 0's first evaluation at or above it."
  echo
  echo "| straggler | strategy | phase | wall s | s to $TARGET | test accuracy | steps |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT"
if [ "${ANCHOR:-1}" = 1 ]; then   # the PyTorch parameter-server peer, same model, batch and optimizer
  RM_BIN="$BIN" HIDDEN="$HIDDEN" BATCH="$BATCH" EPOCHS="$EPOCHS" bash "$root/bench/ps/anchor.sh"
fi
