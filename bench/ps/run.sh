#!/usr/bin/env bash
# bench/ps/run.sh — the straggler experiment (docs/strategies.md#parameter-servers): the same
# Fashion-MNIST job through the ring allreduce, synchronous parameter servers (b = 0 and b = 1
# backup workers) and asynchronous Downpour (s = 0 unbounded, s = 4), with no straggler, a
# persistent one (slow:rank=1:factor=4) and a transient one (slow only between two steps), all
# with `ringmaster run` one after the other on this machine. For each run: wall seconds, test
# accuracy, and the time to the target accuracy (from rank 0's first evaluation at or above it;
# "-" when never reached), written as a markdown table to bench/results/ps.md (and stdout).
#
# Knobs (env): WORKERS (4), SERVERS (1), EPOCHS (6), HIDDEN ("512, 256"), BATCH (64),
# TARGET (0.88), FACTOR (4), TRANSIENT ("200:204" = slow from the job's step 200 to 203: a
# straggler that bounded staleness s = 4 can absorb, delayed by less than s steps' worth of time
# in all; a longer one makes s = 4 wait like sync, see BENCHMARKS.md "Under CPU caps"),
# VARIANTS ("ring sync-b0 sync-b0-S2 sync-b1 async-s0 async-s0-w async-s4 async-s4-w"; a "-S<k>"
# suffix on a PS variant runs it with k servers instead of SERVERS; a "-w" suffix on an async one
# gives it Dean et al.'s warm start, spec.parameterServer.warmStartSteps = WARM, by default one
# epoch's batches, TRAIN_SAMPLES (60000, Fashion-MNIST's training set) / BATCH: fixed before any
# run, not tuned on the test set), STRAGGLERS ("none persistent transient"; also "machine": no
# fault, but worker 1's CPU cap is CPUCAP / FACTOR, a machine FACTOR x slower at everything, its
# share of the allreduce and of the pushes included, where the `slow` fault slows compute only),
# REPEAT (1: each straggler x variant once; k: k passes, the variants alternating within each, so
# a change of the machine's load hits them all), OUT (bench/results/ps.md), ANCHOR (1: then
# bench/ps/anchor.sh, the torch.distributed.rpc peer, for ANCHOR_EPOCHS (EPOCHS) epochs, its
# table to ANCHOR_OUT (bench/results/ps-anchor.md); 0: skip), KEEP (1: keep the run directories).
# CPUCAP ("auto"), CPUCAP_PS (0.3), CPUCAP_SHARES (unset): one emulated machine per process
# (bench/lib/cpucap.sh): every worker capped at CPUCAP CPUs, every server at CPUCAP_PS. "auto" is
# 0.4 when a writable cgroup cpu controller is there (root), else 0 = no caps. Without caps the 4
# workers and the server share this machine's cores, and the straggler's `slow` sleep hands its
# core to the others, so a "4x" straggler slows the ring far less than 4x; with caps it sleeps on
# its own machine. The caps and their sum (per run: WORKERS x CPUCAP + servers x CPUCAP_PS) are
# printed in the header; keep the sum below the cores. CPUCAP_SHARES weighs the capped processes
# against other work on a busy machine (cpucap.sh).
# The samples/s column is rank 0's median "progress" rate times WORKERS (every worker draws the
# same per-worker batch). The whole experiment in one command: bench/ps/full.sh.
# ASYNC_LR (0.01: Adagrad's learning rate for the async variants, PyTorch's default),
# ASYNC_OPTIMIZER (unset; a whole optimizer for them, e.g. "{type: sgd, lr: 0.01, momentum: 0.9}"),
# SYNC_LR (0.02: SGD with momentum 0.9 for the ring and the sync variants, the project's example).
# Run it inside `unshare -n sh -c 'ip link set lo up && exec bench/ps/run.sh'` to keep its ports
# off the host's; `unshare -n` alone leaves loopback down and nothing can connect.
# A smoke run: EPOCHS=1 HIDDEN=128 VARIANTS="ring sync-b1" ANCHOR=0 ...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$root/bin}
WORKERS=${WORKERS:-4} SERVERS=${SERVERS:-1} EPOCHS=${EPOCHS:-6} HIDDEN=${HIDDEN:-512, 256}
BATCH=${BATCH:-64} TARGET=${TARGET:-0.88} FACTOR=${FACTOR:-4} TRANSIENT=${TRANSIENT:-200:204}
VARIANTS=${VARIANTS:-ring sync-b0 sync-b0-S2 sync-b1 async-s0 async-s0-w async-s4 async-s4-w} REPEAT=${REPEAT:-1}
TRAIN_SAMPLES=${TRAIN_SAMPLES:-60000} WARM=${WARM:-$((TRAIN_SAMPLES / BATCH))}
STRAGGLERS=${STRAGGLERS:-none persistent transient}
OUT=${OUT:-$root/bench/results/ps.md}
CPUCAP=${CPUCAP:-auto} CPUCAP_PS=${CPUCAP_PS:-0.3}
ASYNC_LR=${ASYNC_LR:-0.01} SYNC_LR=${SYNC_LR:-0.02}
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-ps.XXXXXX")
# shellcheck source=../lib/cpucap.sh
source "$root/bench/lib/cpucap.sh"
if [ "$CPUCAP" = auto ]; then
  if cpucap_available; then CPUCAP=0.4; else CPUCAP=0; fi
fi
trap 'cpucap_stop; if [ "${KEEP:-0}" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi' EXIT
if [ "$CPUCAP" != 0 ]; then
  cpucap_start "$CPUCAP" "$CPUCAP_PS"
  caps="worker $CPUCAP CPUs, server $CPUCAP_PS CPUs$(awk -v w="$WORKERS" -v s="$SERVERS" -v c="$CPUCAP" \
      -v p="$CPUCAP_PS" 'BEGIN { printf " (sum: %.2f CPUs for the ring, %.2f with %d server(s))", w*c, w*c+s*p, s }')"
  if [ -n "${CPUCAP_SHARES:-}" ]; then caps="$caps, cpu.shares $CPUCAP_SHARES"; fi
else
  caps="none (the processes share the machine's cores)"
fi
echo "== CPU caps: $caps" >&2

strategy() {
  local v=$1 ns=$SERVERS warm=""
  case $v in *-S[0-9]*) ns=${v##*-S}; v=${v%-S*};; esac
  case $v in async-*-w) warm=", warmStartSteps: $WARM"; v=${v%-w};; esac
  case $v in
    ring) echo "  backend: ring";;
    sync-b0) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $ns, mode: sync, backupWorkers: 0}";;
    sync-b1) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $ns, mode: sync, backupWorkers: 1}";;
    async-s0) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $ns, mode: async, stalenessBound: 0$warm}";;
    async-s4) echo "  strategy: parameterServer"; echo "  parameterServer: {replicas: $ns, mode: async, stalenessBound: 4$warm}";;
    *) echo "unknown variant $1" >&2; exit 2;;
  esac
}
optimizer() {  # Downpour used Adagrad; the synchronous variants the project's default SGD
  case $1 in async-*) echo "${ASYNC_OPTIMIZER:-{type: adagrad, lr: $ASYNC_LR\}}";; *) echo "{type: sgd, lr: $SYNC_LR, momentum: 0.9}";; esac
}
fault() {
  case $1 in
    none|machine) echo "";;
    persistent) echo "slow:rank=1:factor=$FACTOR";;
    transient) echo "slow:rank=1:factor=$FACTOR:step=${TRANSIENT%%:*}:until=${TRANSIENT##*:}";;
  esac
}

case " $STRAGGLERS " in
  *" machine "*) [ "$CPUCAP" != 0 ] || { echo "STRAGGLERS=machine needs the CPU caps (CPUCAP)" >&2; exit 2; };;
esac
rows=()
for pass in $(seq 1 "$REPEAT"); do
for st in $STRAGGLERS; do
  for v in $VARIANTS; do
    name="b-$v-$st-$pass"
    {
      echo "apiVersion: ringmaster.dev/v1alpha1"
      echo "kind: TrainingJob"
      echo "metadata: {name: b-$(echo "${v//_/-}" | tr 'A-Z' 'a-z')}"
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
    slowm=""; if [ "$st" = machine ]; then slowm="1:$FACTOR"; fi
    RM_CPUCAP_SLOW="$slowm" RINGMASTER_FAULT="$f" "$BIN/ringmaster" run -f "$work/$name.yaml" -o json \
        --checkpoint-dir "$work/ck-$name" --run-dir "$work/run-$name" > "$work/$name.out" 2> "$work/$name.err"
    rc=$?
    set -e
    t1=$(date +%s.%N)
    row=$(python3 - "$work/$name.out" "$work/run-$name/worker-0.log" "$t0" "$t1" "$TARGET" "$rc" "$WORKERS" <<'PY'
import json, re, sys, datetime, statistics
out, log, t0, t1, target, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
workers = int(sys.argv[7])
try:
    j = json.loads(open(out).read().strip().splitlines()[-1]); st = j["status"]
    phase, acc = st["phase"], st.get("result", {}).get("testAccuracy", float("nan"))
    steps = st.get("result", {}).get("steps", 0)
except Exception:
    phase, acc, steps = f"error rc={rc}", float("nan"), 0
tt, rates = "-", []
for line in open(log, errors="replace"):
    m = re.search(r'^ts=(\S+) .*msg="evaluation".*test_accuracy=([0-9.]+)', line)
    if m and float(m.group(2)) >= target and tt == "-":
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        tt = f"{t - t0:.1f}"
    m = re.search(r'msg="progress".*samples_per_s=([0-9.]+)', line)
    if m:
        rates.append(float(m.group(1)))
sps = f"{statistics.median(rates) * workers:.0f}" if rates else "-"
print(f"{phase} | {t1 - t0:.1f} | {tt} | {sps} | {acc:.4f} | {steps}")
PY
)
    rows+=("| $st | $v | $pass | $row | $(cut -d' ' -f1 /proc/loadavg) |")
    echo "   ${rows[-1]}" >&2
  done
done
done
{
  echo "## Parameter servers: the straggler experiment"
  echo
  echo "\`bench/ps/run.sh\` on $(hostname) ($(nproc) CPUs), $(date -u +%Y-%m-%d), load average at the end:"
  echo "$(cut -d' ' -f1-3 /proc/loadavg). Workers $WORKERS, servers $SERVERS (a -S<k> variant: k), MLP [$HIDDEN], $EPOCHS epochs,"
  echo "batch $BATCH per worker, straggler rank 1 slowed ${FACTOR}x (transient: steps $TRANSIENT), -w: warmStartSteps $WARM; time to $TARGET"
  echo "from the start of \`ringmaster run\` to rank 0's first evaluation at or above it."
  echo "CPU caps (bench/lib/cpucap.sh, one emulated machine per process): $caps."
  echo
  echo "| straggler | strategy | pass | phase | wall s | s to $TARGET | samples/s | test accuracy | steps | load 1m |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT"
if [ "${ANCHOR:-1}" = 1 ]; then   # the PyTorch parameter-server peer, same model, batch and optimizer
  RM_BIN="$BIN" HIDDEN="$HIDDEN" BATCH="$BATCH" EPOCHS="${ANCHOR_EPOCHS:-$EPOCHS}" \
      OUT="${ANCHOR_OUT:-$root/bench/results/ps-anchor.md}" bash "$root/bench/ps/anchor.sh"
fi
