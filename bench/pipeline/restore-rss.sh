#!/usr/bin/env bash
# bench/pipeline/restore-rss.sh — a pipeline stage's peak resident set (VmHWM, the
# workers' `msg="memory"` peak_rss_bytes) when it restores from a checkpoint, against the same job
# started fresh. A stage restores only its own layers (worker/checkpoint/ckpt_shard.h rm_ckpt_set_load_layers:
# every file verified in full, streamed through 1 MiB, only the stage's range kept), so restoring
# should cost no more than starting fresh; before that change the driver re-assembled the whole
# payload (every stage's layers, their momentum) in a staging buffer on every stage.
#
# The model of bench/pipeline/run.sh (MLP 784-8x1024-10, SGD momentum, batch 64, P = 2, M = 4,
# 1F1B). Writes a P = 2 stage set and a P = 4 stage set at step WSTEPS (default 10), then for each
# binary directory in RM_BINS (default "$RM_BIN", i.e. ./bin; give "OLD NEW" to compare builds)
# resumes each set at P = 2 for 2 more steps (the P = 4 set: each new stage's range spans two old
# stages' shards), and runs the same job fresh for reference. Prints one table row per run and
# stage. Run it from the repository root after `make`, in a private network namespace:
#     unshare -n sh -c 'ip link set lo up; bench/pipeline/restore-rss.sh'
# A short smoke (a few minutes); raw logs in $RAW (default a temp dir, removed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
RMB="${RM_BIN:-$root/bin}"
read -r -a BINS <<< "${RM_BINS:-$RMB}"
WSTEPS="${WSTEPS:-10}"
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-pipe-rss.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
cleanup() { [ "$keep_raw" = 1 ] || rm -rf "$RAW"; }
trap cleanup EXIT
for b in "${BINS[@]}"; do
  if [ ! -x "$b/ringmaster" ] || [ ! -x "$b/ringmaster-worker" ]; then
    echo "no $b/ringmaster(-worker): build first"; exit 1
  fi
done

manifest() {   # NAME P STEPS
  cat > "$RAW/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: rss}
spec:
  replicas: $2
  backend: ring
  restartPolicy: {maxRestarts: 0, progressDeadlineSeconds: 300}
  checkpoint: {intervalSteps: $WSTEPS}
  parallelism: {pipelineStages: $2, microBatches: 4, schedule: 1f1b}
  training:
    model: {type: mlp, hidden: [1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024]}
    epochs: 1
    maxSteps: $3
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.005, momentum: 0.9}
    warmupEpochs: 0
EOF
}
kv() { printf '%s\n' "$1" | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2; }

run() {   # BIN NAME YAML CKDIR [--resume]
  local extra=()
  [ -z "${5:-}" ] || extra=("$5")
  "$1/ringmaster" run -f "$3" --checkpoint-dir "$4" --run-dir "$RAW/run-$2" "${extra[@]}" \
    >"$RAW/$2.out" 2>"$RAW/$2.err" || { echo "$2 failed: $(tail -3 "$RAW/$2.err")" >&2; return 1; }
}

rows() {   # LABEL NAME: one row per worker
  for f in "$RAW"/run-"$2"/worker-*.log; do
    m=$(grep -h 'msg="memory"' "$f" | tail -1 || true)
    l=$(grep -h 'msg="checkpoint loaded"' "$f" | tail -1 || true)
    loaded="fresh"
    [ -z "$l" ] || loaded="step $(kv "$l" step)$(b=$(kv "$l" bytes); [ -z "$b" ] || printf ', kept %.1f MiB' "$(echo "$b / 1048576" | bc -l)")"
    printf '| %s | %s | %s | %.1f |\n' "$1" "$(basename "$f" .log)" "$loaded" \
      "$(echo "$(kv "$m" peak_rss_bytes) / 1000000" | bc -l)"
  done
}

manifest w2 2 "$WSTEPS"
manifest w4 4 "$WSTEPS"
manifest r2 2 $((WSTEPS + 2))
w="${BINS[${#BINS[@]}-1]}"
echo "== writing a P = 2 and a P = 4 set at step $WSTEPS ($w)" >&2
run "$w" w2 "$RAW/w2.yaml" "$RAW/ck-2"
run "$w" w4 "$RAW/w4.yaml" "$RAW/ck-4"
echo "| binary | worker (stage) | restored from | peak RSS (MB) |"
echo "|---|---|---|---|"
i=0
for b in "${BINS[@]}"; do
  i=$((i + 1))
  tag="bin$i"
  [ "${#BINS[@]}" = 1 ] || { [ $i = 1 ] && tag="before" || tag="after"; }
  echo "== $tag ($b): fresh, resume P=2 set, resume P=4 set" >&2
  run "$b" "$tag-fresh" "$RAW/r2.yaml" "$RAW/ck-fresh-$tag" && rows "$tag, fresh" "$tag-fresh"
  for s in 2 4; do
    rm -rf "$RAW/ck-$tag-$s"; cp -r "$RAW/ck-$s" "$RAW/ck-$tag-$s"
    run "$b" "$tag-from$s" "$RAW/r2.yaml" "$RAW/ck-$tag-$s" --resume && rows "$tag, P=$s set" "$tag-from$s"
  done
done
