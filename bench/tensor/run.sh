#!/usr/bin/env bash
# bench/tensor/run.sh — tensor parallelism for the transformer (docs/models-and-data.md, "Tensor
# parallelism"; worker/tensor/step_tensor.c with the split of worker/tensor/tp_gpt.h).
#
# The full run, on an idle machine, one command from the repository root after `make`:
#     unshare -n sh -c 'ip link set lo up; OUT=bench/results/raw/tensor.txt bench/tensor/run.sh'
# (`unshare -n` only isolates its loopback ports.) `make bench` runs it too (bench/run-all.sh);
# bench/notes/tensor.md is the curated section BENCHMARKS.md is assembled from.
#
# Part 1, memory: one GPT shape at T = 1, 2, 4 (one data-parallel replica, `ringmaster run`): each
#  rank's parameter and optimizer-state bytes (its "memory" log line, the
#  ringmaster_worker_memory_bytes gauge) beside the plan's count — the whole model / T, plus what
#  every rank holds whole (the LayerNorms, wpe, the row layers' biases: (1 - 1/T) of them on top)
#  and the vocabulary padding — and the worker's peak resident set (getrusage; it includes the
#  driver's whole-model buffers, which hold pages only at an evaluation, a checkpoint or the export).
# Part 2, traffic: the tensor group's bytes per step (the "tensor stats" log line, forward and
#  backward) beside Megatron's count for GPT: per block two allreduces of batch x context x embed
#  forward (after attention and after the MLP: g) and two backward (f), the embedding's sum forward
#  and the head's input gradient backward (batch x context x embed each), and the vocab-parallel
#  cross-entropy's (batch x context x (T + 2): the row maxima gathered, then the sums of exp and
#  the target logits).
# Part 3, speed: T = 2 against D = 2 (2 workers either way, the same global batch) on the same
#  model at several widths (embed EMBEDS, 2 blocks, 8 heads, context 64, global batch 16): time per
#  step (the slower worker's training seconds / steps) — where the split's smaller GEMMs and its
#  4 allreduces of activations per block cost less than D = 2's allreduce of every gradient. One
#  kernel thread per worker (RINGMASTER_THREADS=1). T = 2 runs twice: with f (the input gradients'
#  sums) overlapped with the weight gradients' GEMMs, the default, and without
#  (RINGMASTER_TENSOR_OVERLAP=0).
# Part 4, the grid: part 1's model at T x P = 2 x 2 (4 ranks, one replica) beside T = 1: each rank's
#  pieces (the "tensor round" line's count: its stage's blocks split, stage 0 with the embedding,
#  the last with ln_f and its copy of the wte rows) and its checkpoint shard's bytes (the pieces set
#  every rank writes, no gather) against T = 1's whole checkpoint file.
# Part 5, ZeRO-1 in the data-parallel group: part 1's model at T x D = 2 x 2 with sharding none and
#  optimizer: each rank's parameter and optimizer-state bytes (the "memory" line) and its checkpoint
#  shard (unsharded: replica 0's two ranks write the pieces set; ZeRO-1: all four, each its shard).
# Prints its tables (OUT=FILE also writes them there); raw logs in $RAW (default a temp dir,
# removed). QUICK=1: a smoke run (small shapes, 5 steps). STEPS=N, EMBEDS="64 128 256 512" adjust;
# PARTS="1 3 4" runs some (parts 1 and 2 are one run; default all).
# RM_BIN (default ./bin) must hold ringmaster. Do not read numbers of a QUICK run as measurements.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
RMB="${RM_BIN:-$root/bin}"
OUT="${OUT:-}"
py=/usr/bin/python3
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-tensor.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
cleanup() { [ "$keep_raw" = 1 ] || rm -rf "$RAW"; }
trap cleanup EXIT
[ -x "$RMB/ringmaster" ] || { echo "no $RMB/ringmaster: build first (make)"; exit 1; }
T0=$(date +%s)
QUICK="${QUICK:-0}"
STEPS="${STEPS:-$([ "$QUICK" = 1 ] && echo 5 || echo 40)}"
read -r -a EMBEDS <<< "${EMBEDS:-$([ "$QUICK" = 1 ] && echo "64 128" || echo "64 128 256 512")}"
# part 1/2's shape
if [ "$QUICK" = 1 ]; then ML=2 MH=4 MC=64 MCTX=32 MB=4; else ML=4 MH=8 MC=256 MCTX=64 MB=8; fi
export RINGMASTER_THREADS=1

PARTS="${PARTS:-1 2 3 4 5}"
SHARDING="" # manifest's spec.training.sharding (empty: the default, none)
part() { [[ " $PARTS " == *" $1 "* ]]; }

# manifest NAME REPLICAS T LAYERS HEADS EMBED CONTEXT BATCH [STAGES]
manifest() {
  local par=""
  [ "$3" = 1 ] || par="  parallelism: {tensorParallel: $3}"
  [ -z "${9:-}" ] || par="  parallelism: {tensorParallel: $3, pipelineStages: $9}"
  cat > "$RAW/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  backend: ring
  restartPolicy: {maxRestarts: 0, progressDeadlineSeconds: 600}
  checkpoint: {intervalSteps: 1000000}
$par
  training:
${SHARDING:+    sharding: $SHARDING}
    model: {type: gpt, layers: $4, heads: $5, embed: $6, context: $7, vocab: 256}
    data: {uri: "builtin:tinyshakespeare", format: text, validation: {fraction: 0.01}}
    optimizer: {type: adamw, lr: 0.001, weightDecay: 0.1}
    batchSizePerWorker: $8
    epochs: 100
    maxSteps: $STEPS
    evalEverySteps: 0
EOF
}
run() { # NAME: runs the manifest; 0 when it succeeded
  echo "== $1 ($STEPS steps)" >&2
  "$RMB/ringmaster" run -f "$RAW/$1.yaml" --checkpoint-dir "$RAW/ck-$1" --run-dir "$RAW/run-$1" \
    >"$RAW/$1.out" 2>"$RAW/$1.err" || { echo "$1 failed: $(tail -3 "$RAW/$1.err")" >&2; return 1; }
}
last() { grep -h "msg=\"$2\"" "$RAW/run-$1/worker-$3.log" 2>/dev/null | tail -1 || true; }

# ---- parts 1 and 2: T = 1, 2, 4 on one replica
mem=(); traffic=()
for T in 1 2 4; do
  part 1 || part 2 || break
  n="mem-t$T"
  manifest "$n" "$T" "$T" "$ML" "$MH" "$MC" "$MCTX" "$MB"
  run "$n" || continue
  m=$(last "$n" memory 0); s=$(last "$n" "tensor stats" 0)
  row=$($py - "$T" "$ML" "$MH" "$MC" "$MCTX" "$MB" "$m" "$s" <<'PY'
import re, sys
T, L, H, C, ctx, B = map(int, sys.argv[1:7])
kv = lambda line: dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
m, s = kv(sys.argv[7]), kv(sys.argv[8])
V = 256
Vp = -(-V // T) * T
blk = 12 * C * C + 13 * C
whole = V * C + ctx * C + L * blk + 2 * C
rep = ctx * C + L * 6 * C + 2 * C            # wpe, ln_1, ln_2, the row biases, ln_f
split = whole - rep
plan = (split + (Vp - V) * C) // T + rep   # this rank's floats (the padding rows included)
target = whole / T
pb, ob = int(m.get("params_bytes", 0)), int(m.get("optimizer_bytes", 0))
print("MEM| %d | %d | %d | %.0f | %.3f | %.2f | %.2f | %.1f |" % (
    T, whole, plan, target, plan / target, pb / 2**20, ob / 2**20, float(m.get("peak_rss_bytes", 0)) / 2**20))
N = B * ctx
mf = 4 * (N * C + 2 * L * N * C + N * (T + 2)) if T > 1 else 0
mb = 4 * (N * C + 2 * L * N * C) if T > 1 else 0
f, b = float(s.get("fwd_bytes_per_step", 0)), float(s.get("bwd_bytes_per_step", 0))
print("NET| %d | %.0f | %d | %.0f | %d | %.3f | %s |" % (
    T, f, mf, b, mb, (f + b) / (mf + mb) if mf + mb else 0, s.get("tensor_wait_ms_per_step", "-")))
PY
)
  mem+=("$(printf '%s\n' "$row" | sed -n 's/^MEM//p')")
  [ "$T" = 1 ] || traffic+=("$(printf '%s\n' "$row" | sed -n 's/^NET//p')")
done

# ---- part 3: T = 2 vs D = 2, global batch 16
speed=()
for C in "${EMBEDS[@]}"; do
  part 3 || break
  manifest "t2-c$C" 2 2 2 8 "$C" 64 16
  manifest "t2s-c$C" 2 2 2 8 "$C" 64 16
  manifest "d2-c$C" 2 1 2 8 "$C" 64 8
  st=()
  for n in "t2-c$C" "d2-c$C" "t2s-c$C"; do # t2s: f not overlapped (RINGMASTER_TENSOR_OVERLAP=0)
    ov=1; [[ $n != t2s-* ]] || ov=0
    if ! RINGMASTER_TENSOR_OVERLAP=$ov run "$n"; then st+=("-"); continue; fi
    st+=("$($py - "$RAW"/run-"$n"/worker-*.log <<'PY'
import re, sys
worst = 0; steps = 0
for f in sys.argv[1:]:
    for line in open(f):
        if 'msg="training done"' in line:
            kv = dict(re.findall(r'(\w+)=(\S+)', line))
            worst = max(worst, float(kv["seconds"])); steps = int(kv["steps"])
print("%.1f" % (1e3 * worst / steps) if steps else "-")
PY
)")
  done
  ratio=$($py -c "import sys; a,b='${st[0]}','${st[1]}'; print('%.2f' % (float(b)/float(a)) if '-' not in (a,b) and float(a)>0 else '-')")
  ovr=$($py -c "a,b='${st[0]}','${st[2]}'; print('%.2f' % (float(b)/float(a)) if '-' not in (a,b) and float(a)>0 else '-')")
  speed+=("| $C | ${st[0]} | ${st[1]} | $ratio | ${st[2]} | $ovr |")
done

# ---- part 4: the grid T x P = 2 x 2 beside T = 1, each rank's pieces and checkpoint shard
grid=()
if part 4; then
  manifest g1 1 1 "$ML" "$MH" "$MC" "$MCTX" "$MB"
  manifest g22 4 2 "$ML" "$MH" "$MC" "$MCTX" "$MB" 2
  if run g1 && run g22; then
    wb=$(stat -c %s "$(ls "$RAW"/ck-g1/ckpt-*.rmck | tail -1)")
    for r in 0 1 2 3; do
      line=$(last g22 "tensor round" "$r")
      pieces=$(printf '%s\n' "$line" | sed -n 's/.* pieces=\([0-9]*\) of \([0-9]*\).*/\1 \2/p')
      read -r pc whole <<< "$pieces"
      stage=$(printf '%s\n' "$line" | sed -n 's/.* p=\([0-9]*\) .*/\1/p')
      sb=$(stat -c %s "$(ls "$RAW"/ck-g22/shard-*-"$r"-of-4.rmck | tail -1)")
      grid+=("$($py -c "print('| %d | %s | %s | %s | %.3f | %d | %d | %.3f |' % ($r, '$stage', '$pc', '$whole', $pc / $whole, $sb, $wb, $sb / $wb))")")
    done
  fi
fi

# ---- part 5: ZeRO-1 in the data-parallel group, T x D = 2 x 2
zero=()
if part 5; then
  for sh in none optimizer; do
    SHARDING=$sh manifest "z-$sh" 4 2 "$ML" "$MH" "$MC" "$MCTX" "$MB"
    run "z-$sh" || continue
    for r in 0 1 2 3; do
      m=$(last "z-$sh" memory "$r")
      pb=$(printf '%s\n' "$m" | grep -o 'params_bytes=[0-9]*' | cut -d= -f2)
      ob=$(printf '%s\n' "$m" | grep -o 'optimizer_bytes=[0-9]*' | cut -d= -f2)
      f=$(ls "$RAW/ck-z-$sh"/shard-*-"$r"-of-*.rmck 2>/dev/null | tail -1 || true)
      sb=$([ -n "$f" ] && stat -c %s "$f" || echo 0)
      zero+=("$($py -c "print('| $sh | $r | %.2f | %.2f | %d |' % (${pb:-0} / 2**20, ${ob:-0} / 2**20, $sb))")")
    done
  done
fi

{
  echo "# Tensor parallelism: the transformer"
  echo
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Date: $(date -u +%Y-%m-%dT%H:%MZ). Command: \`QUICK=$QUICK STEPS=$STEPS EMBEDS=\"${EMBEDS[*]}\" bench/tensor/run.sh\`. Took $(( $(date +%s) - T0 )) s."
  echo "One kernel thread per worker; \`ringmaster run\`, ring backend (a tensor group of one host on shared memory)."
  echo
  echo "Memory per rank, GPT L$ML H$MH C$MC context $MCTX vocabulary 256, AdamW (2 state buffers), batch $MB:"
  echo
  echo "| T | whole model floats | this rank's floats (plan) | whole / T | plan / (whole / T) | params MiB (measured) | optimizer MiB (measured) | peak RSS MiB |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${mem[@]}"
  echo
  echo "Tensor-group traffic per step (bytes allreduced; Megatron's count: 2 forward and 2 backward allreduces of batch x context x embed per block, the embedding's and the head's, the cross-entropy's batch x context x (T + 2)):"
  echo
  echo "| T | forward measured | forward Megatron | backward measured | backward Megatron | measured / Megatron | wait ms/step |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${traffic[@]}"
  echo
  echo "Step time, T = 2 against D = 2 (2 workers each, global batch 16 sequences of 64, 2 blocks, 8 heads):"
  echo
  echo "| embed | T = 2 ms/step | D = 2 ms/step | D / T (> 1: T faster) | T = 2, f not overlapped, ms/step | not overlapped / overlapped |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${speed[@]}"
  if [ ${#grid[@]} -gt 0 ]; then
    echo
    echo "The grid T x P x D = 2 x 2 x 1 (part 1's model, one micro-batch): each rank's pieces and its checkpoint shard (pieces set) against T = 1's whole checkpoint file:"
    echo
    echo "| rank | stage | pieces floats | whole model floats | pieces / whole | shard bytes | T = 1 checkpoint bytes | shard / whole |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${grid[@]}"
  fi
  if [ ${#zero[@]} -gt 0 ]; then
    echo
    echo "ZeRO-1 in the data-parallel group (part 1's model, T x D = 2 x 2, AdamW): each rank's memory and its shard of the last checkpoint (0: the rank writes none):"
    echo
    echo "| sharding | rank | params MiB | optimizer MiB | checkpoint shard bytes |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${zero[@]}"
  fi
} > "$RAW/table.md"
cat "$RAW/table.md"
[ -z "$OUT" ] || cp "$RAW/table.md" "$OUT"
