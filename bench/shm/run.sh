#!/usr/bin/env bash
# bench/shm/run.sh — allreduce busbw of the shm backend (worker/comm/comm_shm.c) beside the TCP ring, both
# through `ringmaster-worker bench` (static world on 127.0.0.1), with the machine's memcpy bandwidth
# as the limit beside them. Side by side in one run; prints nccl-tests tables and writes
# bench/results/shm.md. Usage: RM_BIN=bin bench/shm/run.sh   (QUICK=1: 1 KiB..16 MiB, few iters)
# PEERS=1 (default) also runs, in the same loop and with the same sizes, PyTorch 1.13's Gloo
# (/usr/bin/python3, bench/allreduce/gloo_peer.py) and Open MPI's vader shared-memory transport with
# single-copy (CMA) on and off; PEERS=0 skips them. SHM_STAGES="262144 1048576" (default) runs the shm
# backend once per staging size (RINGMASTER_SHM_STAGE_BYTES, bytes per rank and buffer set; rows
# "shm@256K", "shm@1024K"), so an idle run shows which piece size the machine's caches favour.
# SHM_OLD_BIN=DIR adds a row "shm-old" with DIR/ringmaster-worker (e.g. a build of an older commit) at
# its own default staging, in the same loop: old vs new side by side.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/shm.md}"
RAW=$(mktemp -d); trap 'rm -rf "$RAW"' EXIT
WORLDS=(${WORLDS:-2 4})
if [ "${QUICK:-0}" = 1 ]; then ARGS=(-b 1K -e 16M -f 4 -n 5 -w 1); else ARGS=(-b 1K -e 256M -f 4 -n 10 -w 2); fi

source "$root/bench/lib/ports.sh"   # free_ports, gloo_ranks

run() {   # run BACKEND N OUTFILE [STAGE_BYTES]
  local be=$1 n=$2 out=$3 peers pids=() w=${WBIN:-$W}
  if [ -n "${4:-}" ]; then export RINGMASTER_SHM_STAGE_BYTES=$4; else unset RINGMASTER_SHM_STAGE_BYTES; fi
  peers=$(free_ports "$n")
  for r in $(seq 1 $((n - 1))); do
    timeout 300 "$w" bench --backend "$be" --world "$n" --rank "$r" --peers "$peers" --timeout 60 "${ARGS[@]}" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  timeout 300 "$w" bench --backend "$be" --world "$n" --rank 0 --peers "$peers" --timeout 60 "${ARGS[@]}" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  unset RINGMASTER_SHM_STAGE_BYTES
}

py=/usr/bin/python3
gloo() {   # gloo N OUTFILE
  gloo_ranks "$1" "$2" "$root/bench/allreduce/gloo_peer.py" 300 "${ARGS[@]}"
}
vader() {   # vader N SINGLE_COPY(cma|none) OUTFILE
  OMPI_MCA_btl_vader_single_copy_mechanism=$2 OMPI_MCA_plm_rsh_agent=false \
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$1" --mca btl vader,self \
    "$W" bench --backend mpi "${ARGS[@]}" >> "$3" 2>> "$3.err" || echo "# FAILED rc=$?" >> "$3"
}
BACKENDS=()
for st in ${SHM_STAGES:-262144 1048576}; do BACKENDS+=("shm@$((st / 1024))K"); done
[ -n "${SHM_OLD_BIN:-}" ] && BACKENDS+=(shm-old)
BACKENDS+=(ring)
if [ "${PEERS:-1}" = 1 ]; then
  $py -c 'import torch.distributed' 2>/dev/null && BACKENDS+=(gloo)
  command -v mpirun >/dev/null 2>&1 && BACKENDS+=(vader-cma vader-nocopy)
fi

cc -O2 -o "$RAW/memcpy" "$root/bench/shm/memcpy.c"
{
  echo "# Shared-memory allreduce (bench/shm/run.sh)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo "Load average at start: $(cut -d' ' -f1-3 /proc/loadavg). Command: \`RM_BIN=bin QUICK=${QUICK:-0} bench/shm/run.sh\`."
  echo
  echo "Limit: $("$RAW/memcpy" 64 10)"
} > "$RAW/report"
for n in "${WORLDS[@]}"; do
  for be in "${BACKENDS[@]}"; do
    echo "== $n ranks: $be"
    case $be in
      gloo) gloo "$n" "$RAW/$be.$n" ;;
      vader-cma) vader "$n" cma "$RAW/$be.$n" ;;
      vader-nocopy) vader "$n" none "$RAW/$be.$n" ;;
      shm@*) k=${be#shm@}; run shm "$n" "$RAW/$be.$n" $((${k%K} * 1024)) ;;
      shm-old) WBIN="$SHM_OLD_BIN/ringmaster-worker" run shm "$n" "$RAW/$be.$n" ;;
      *) run "$be" "$n" "$RAW/$be.$n" ;;
    esac
    { echo; echo "## $n ranks, backend $be"; echo; echo '```'; cat "$RAW/$be.$n"; echo '```'; } >> "$RAW/report"
  done
done
echo "" >> "$RAW/report"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)." >> "$RAW/report"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done || true
mkdir -p "$(dirname "$OUT")"
cp "$RAW/report" "$OUT"
cat "$OUT"
