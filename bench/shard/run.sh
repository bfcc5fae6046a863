#!/usr/bin/env bash
# bench/shard/run.sh — what sharding (ZeRO stages, docs/strategies.md#sharding) costs and saves.
#  1. reduce_scatter and all_gather busbw (nccl-tests format, factor (n-1)/n) of ringmaster's ring
#     against Open MPI (TCP) and PyTorch Gloo (all_gather; reduce_scatter only if this torch's Gloo
#     has it — 1.13's does not, and the report says so), next to the ring allreduce, 2 and 4 ranks.
#  2. Step time and per-rank memory (the strategy's ringmaster_worker_memory_bytes kinds and the
#     peak RSS) for sharding none/optimizer/gradients/full on the wide MLP (hidden 4096,4096,4096,
#     Adam) at 2 and 4 workers (static world over loopback, a few steps each).
# Writes bench/results/shard.md (OUT=...), raw outputs in $RAW (default a temp dir, removed).
# QUICK=1: a smoke run (a few minutes under load: small sizes, hidden 1024x3, 2 workers, 3 steps).
# HIDDEN_OVERRIDE, STEPS_OVERRIDE, WORLDS_OVERRIDE ("2 4"), STAGES_OVERRIDE ("none full"),
# COLL=0 (stages only) and TRAIN=0 (collectives only) adjust a run.
# The collectives against Gloo and Open MPI alone, on an idle machine (one command, ~10 min):
#   TRAIN=0 bench/shard/run.sh        (QUICK=1 TRAIN=0: a one-minute smoke of the same)
# RM_BIN (default ./bin) must hold ringmaster-worker. Runs alone; never in parallel with others.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/shard.md}"
py=/usr/bin/python3
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-shard.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ "$keep_raw" = 1 ] || rm -rf "$RAW"
}
trap cleanup EXIT
[ -x "$W" ] || { echo "no $W: build first (make)"; exit 1; }

QUICK="${QUICK:-0}"
if [ "$QUICK" = 1 ]; then
  SIZES=(-b 1K -e 4M -f 16 -n 3 -w 1); WORLDS=(2); HIDDEN=1024,1024,1024; STEPS=3
else
  SIZES=(-b 1K -e 256M -f 4 -n 5 -w 1); WORLDS=(2 4); HIDDEN=4096,4096,4096; STEPS=8
fi
# overrides: HIDDEN=..., STEPS=N, WORLDS="2 4", COLL=0 (skip the collectives, only the stages)
[ -n "${HIDDEN_OVERRIDE:-}" ] && HIDDEN=$HIDDEN_OVERRIDE
[ -n "${STEPS_OVERRIDE:-}" ] && STEPS=$STEPS_OVERRIDE
[ -n "${WORLDS_OVERRIDE:-}" ] && read -r -a WORLDS <<< "$WORLDS_OVERRIDE"
COLL="${COLL:-1}"
TRAIN="${TRAIN:-1}"
STAGES=(none optimizer gradients full)
[ -n "${STAGES_OVERRIDE:-}" ] && read -r -a STAGES <<< "$STAGES_OVERRIDE"

source "$root/bench/lib/ports.sh"   # free_ports, gloo_ranks

ring() {   # ring N OUTFILE bench-args...
  local n=$1 out=$2; shift 2
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    timeout 600 "$W" bench --world "$n" --rank "$r" --peers "$peers" --timeout 60 "$@" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  timeout 600 "$W" bench --world "$n" --rank 0 --peers "$peers" --timeout 60 "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

mpi() {   # mpi N OUTFILE args...
  local n=$1 out=$2; shift 2
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_plm_rsh_agent=false \
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl tcp,self \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$W" bench --backend mpi "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
}

gloo() {   # gloo N OUTFILE args...
  local n=$1 out=$2; shift 2
  gloo_ranks "$n" "$out" "$root/bench/shard/gloo_shard_peer.py" 600 "$@"
}

train() {   # train N STAGE OUTPREFIX: a static world of N workers, STEPS steps, logs per rank
  local n=$1 stage=$2 pre=$3
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    timeout 900 "$W" train --peers "$peers" --rank "$r" --sharding "$stage" --optimizer adam \
      --hidden "$HIDDEN" --batch 64 --max-steps "$STEPS" --metrics-addr off \
      --comm-timeout 120 > "$pre.r$r.log" 2>&1 &
    pids+=($!)
  done
  timeout 900 "$W" train --peers "$peers" --rank 0 --sharding "$stage" --optimizer adam \
    --hidden "$HIDDEN" --batch 64 --max-steps "$STEPS" --metrics-addr off \
    --comm-timeout 120 > "$pre.r0.log" 2>&1 || echo "FAILED rc=$?" >> "$pre.r0.log"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

{ echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "nproc=$(nproc)";
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')";
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)";
  echo "torch=$($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)";
  echo "mpi=$(mpirun --version 2>/dev/null | head -1 || echo none)";
  echo "quick=$QUICK"; echo "hidden=$HIDDEN"; echo "steps=$STEPS"; } > "$RAW/meta"
have_mpi=0; command -v mpirun >/dev/null 2>&1 && have_mpi=1
have_torch=0; $py -c 'import torch.distributed' 2>/dev/null && have_torch=1

for n in "${WORLDS[@]}"; do
  for op in allreduce reduce_scatter all_gather; do
    [ "$COLL" = 1 ] || continue
    echo "== $n ranks: ring $op"
    ring "$n" "$RAW/ring.$op.$n" --op "$op" "${SIZES[@]}"
    if [ "$have_mpi" = 1 ]; then echo "== $n ranks: open mpi $op"; mpi "$n" "$RAW/mpi.$op.$n" --op "$op" "${SIZES[@]}"; fi
    if [ "$have_torch" = 1 ] && [ "$op" != allreduce ]; then
      echo "== $n ranks: gloo $op"; gloo "$n" "$RAW/gloo.$op.$n" --op "$op" "${SIZES[@]}"
    fi
  done
  for st in "${STAGES[@]}"; do
    [ "$TRAIN" = 1 ] || continue
    echo "== $n workers: train sharding=$st"
    train "$n" "$st" "$RAW/train.$st.$n"
  done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW/meta"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -3 "$f"; }; done || true

$py "$root/bench/shard/report.py" "$RAW" "$OUT"
echo "wrote $OUT"
