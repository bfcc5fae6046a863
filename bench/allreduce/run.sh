#!/usr/bin/env bash
# bench/allreduce/run.sh — allreduce busbw of ringmaster's ring against PyTorch Gloo and Open MPI
# (TCP and shared-memory transports) side by side, 1 KiB .. 256 MiB, 2 and 4 ranks, plus the
# physical limit (a plain loopback TCP transfer, single stream and both directions at once) and the
# fusion benchmark (200 layers x 10k floats: per-layer allreduce vs fused buckets).
# Writes bench/results/allreduce.md (OUT=... to change) and keeps raw outputs in $RAW (default a
# temp dir, removed). Runs alone: RM_BIN (default ./bin) must hold ringmaster-worker.
# QUICK=1 runs a reduced set (seconds) for smoke tests. ROUNDS=N (default 2) repeats every
# configuration in interleaved rounds and the report keeps each one's best round (noisy shared
# machine). Takes ~4-5 minutes on 2 cores otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/allreduce.md}"
py=/usr/bin/python3
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-allreduce.XXXXXX); keep_raw=0; fi
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
  SMALL=(-b 1K -e 64K -f 8 -n 5 -w 1); LARGE=(-b 1M -e 4M -f 4 -n 3 -w 1); WORLDS=(2); LB_MB=256
  FUSION=(--fusion -n 3 -w 1 --layers 50)
else
  SMALL=(-b 1K -e 1M -f 4 -n 50 -w 5); LARGE=(-b 4M -e 256M -f 4 -n 5 -w 1); WORLDS=(2 4); LB_MB=2048
  FUSION=(--fusion -n 20 -w 3)
fi

source "$root/bench/lib/ports.sh"   # free_ports, gloo_ranks

ring() {   # ring N OUTFILE bench-args...
  local n=$1 out=$2; shift 2
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    timeout 300 "$W" bench --world "$n" --rank "$r" --peers "$peers" --timeout 60 "$@" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  timeout 300 "$W" bench --world "$n" --rank 0 --peers "$peers" --timeout 60 "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

gloo() {   # gloo N OUTFILE args...
  local n=$1 out=$2; shift 2
  gloo_ranks "$n" "$out" "$root/bench/allreduce/gloo_peer.py" 300 "$@"
}

mpi() {   # mpi N BTL OUTFILE args...
  local n=$1 btl=$2 out=$3; shift 3
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_plm_rsh_agent=false \
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl "$btl" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$W" bench --backend mpi "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
}

{ echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "nproc=$(nproc)";
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')";
  echo "kernel=$(uname -r)"; echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)";
  echo "torch=$($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)";
  echo "mpi=$(mpirun --version 2>/dev/null | head -1 || echo none)"; } > "$RAW/meta"

cc -O2 -pthread -o "$RAW/loopback" "$root/bench/allreduce/loopback.c"
have_mpi=0; command -v mpirun >/dev/null 2>&1 && have_mpi=1
have_torch=0; $py -c 'import torch.distributed' 2>/dev/null && have_torch=1
ROUNDS="${ROUNDS:-2}"
echo "rounds=$ROUNDS" >> "$RAW/meta"
for round in $(seq 1 "$ROUNDS"); do
echo "== round $round: loopback limit"
"$RAW/loopback" -s "$LB_MB" >> "$RAW/loopback.txt"
"$RAW/loopback" -s "$LB_MB" -d >> "$RAW/loopback.txt"
tail -2 "$RAW/loopback.txt"
for n in "${WORLDS[@]}"; do
  echo "== $n ranks: ring"
  ring "$n" "$RAW/ring.$n" "${SMALL[@]}"; ring "$n" "$RAW/ring.$n" "${LARGE[@]}"
  if [ "$have_torch" = 1 ]; then
    echo "== $n ranks: gloo"
    gloo "$n" "$RAW/gloo.$n" "${SMALL[@]}"; gloo "$n" "$RAW/gloo.$n" "${LARGE[@]}"
  fi
  if [ "$have_mpi" = 1 ]; then
    echo "== $n ranks: open mpi tcp"
    mpi "$n" tcp,self "$RAW/mpitcp.$n" "${SMALL[@]}"; mpi "$n" tcp,self "$RAW/mpitcp.$n" "${LARGE[@]}"
    echo "== $n ranks: open mpi shared memory"
    mpi "$n" vader,self "$RAW/mpism.$n" "${SMALL[@]}"; mpi "$n" vader,self "$RAW/mpism.$n" "${LARGE[@]}"
  fi
done
done
echo "== fusion (2 ranks)"
ring 2 "$RAW/fusion.2" "${FUSION[@]}"
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW/meta"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done || true
$py "$root/bench/allreduce/report.py" "$RAW" "$OUT" "$([ "$QUICK" = 1 ] && echo QUICK=1)"
echo "wrote $OUT"
