#!/usr/bin/env bash
# bench/hier/run.sh — hierarchical allreduce (worker/comm/comm_hier.c, backend "hier") beside the flat
# TCP ring and the flat shm comm, 4 ranks on this host faked as 2 nodes x 2 ranks (--nodes
# a,a,b,b: shm inside each fake node, a TCP ring per local index between them), through
# `ringmaster-worker bench` in static mode. Side by side in one run; prints nccl-tests tables and
# writes bench/results/hier.md.
# What this measures: on ONE host the "inter-node" ring is loopback TCP, as fast as the flat ring's
# links, so this shows the hierarchical comm's overhead (extra phases, two comms), not its win; the
# win needs a slow link between nodes (kubesim's namespaced nodes with tc shaping, tests/kubesim/netns.sh).
# Usage: RM_BIN=bin bench/hier/run.sh   (QUICK=1: 1 KiB..16 MiB, few iters)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/hier.md}"
RAW=$(mktemp -d); trap 'rm -rf "$RAW"' EXIT
N=4
NODES=${NODES:-a,a,b,b}
if [ "${QUICK:-0}" = 1 ]; then ARGS=(-b 1K -e 16M -f 4 -n 5 -w 1); else ARGS=(-b 1K -e 256M -f 4 -n 10 -w 2); fi

source "$root/bench/lib/ports.sh"   # free_ports, gloo_ranks

run() {   # run BACKEND OUTFILE
  local be=$1 out=$2 peers pids=()
  peers=$(free_ports "$N")
  for r in $(seq 1 $((N - 1))); do
    timeout 600 "$W" bench --backend "$be" --world "$N" --rank "$r" --peers "$peers" --nodes "$NODES" \
      --timeout 60 "${ARGS[@]}" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  timeout 600 "$W" bench --backend "$be" --world "$N" --rank 0 --peers "$peers" --nodes "$NODES" \
    --timeout 60 "${ARGS[@]}" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
}

{
  echo "# Hierarchical allreduce on one host (bench/hier/run.sh)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo "Load average at start: $(cut -d' ' -f1-3 /proc/loadavg). Command: \`RM_BIN=bin QUICK=${QUICK:-0} bench/hier/run.sh\`."
  echo
  echo "$N ranks as 2 fake nodes x 2 ranks (--nodes $NODES). hier = shm inside each node + a TCP ring"
  echo "per local index across; ring = the flat TCP ring over all $N; shm = the flat shared-memory comm."
  echo "All links are loopback: this is the hierarchical comm's overhead on one host, not the gain over"
  echo "a slow inter-node link (that needs shaped links between namespaced nodes)."
} > "$RAW/report"
for be in hier ring shm; do
  echo "== $N ranks: $be"
  run "$be" "$RAW/$be"
  { echo; echo "## backend $be"; echo; echo '```'; cat "$RAW/$be"; echo '```'; } >> "$RAW/report"
done
echo "" >> "$RAW/report"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)." >> "$RAW/report"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done || true
mkdir -p "$(dirname "$OUT")"
cp "$RAW/report" "$OUT"
cat "$OUT"
