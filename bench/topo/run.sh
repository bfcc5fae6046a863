#!/usr/bin/env bash
# bench/topo/run.sh — allreduce busbw of 2 nodes x 2 ranks across a shaped inter-node link
# (docs/strategies.md#topology):
# the nodes are kubesim's network namespaces (tests/kubesim/netns.sh, bridge + veth, tbf at LINK's
# rate and netem delay where the kernel has netem), each rank a `ringmaster-worker bench` inside its
# node's namespace (static world: ranks 0,1 on node-0, 2,3 on node-1, so the flat ring crosses the
# link once each way per ring). Prints nccl-tests tables and writes bench/results/topo.md.
#
#   RM_BIN=bin bench/topo/run.sh            (QUICK=1 by default here: 1 MiB..16 MiB, few iterations)
#   LINK=1gbit,200us   the inter-node link (default)
#   QUICK=0            1 MiB..256 MiB, more iterations
#   TOPO_VARIANTS      space-separated NAME[:ENV=VAL[,ENV=VAL...]] run side by side, default
#                      "ring hier": the flat TCP ring and the hierarchical allreduce (comm_hier.c:
#                      shared memory inside each node, a TCP ring across the link). NAME is the
#                      backend unless BACKEND_<NAME>=... says otherwise; the hier backend is told
#                      the ranks' nodes (--nodes node-0,node-0,node-1,node-1).
# Needs root (network namespaces); never changes the caller's own namespace.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
LINK=${LINK:-1gbit,200us}
if [ -z "${KUBESIM_NETNS_NODES:-}" ]; then
  exec "$root/tests/kubesim/netns.sh" run --nodes 2 --node-link "$LINK" -- bash "$0" "$@"
fi
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/topo.md}"
RAW=$(mktemp -d); trap 'rm -rf "$RAW"' EXIT
if [ "${QUICK:-1}" = 1 ]; then ARGS=(-b 1M -e 16M -f 4 -n 5 -w 1); else ARGS=(-b 1M -e 256M -f 4 -n 10 -w 2); fi
read -r -a NODES <<<"$KUBESIM_NETNS_NODES"      # "netns=addr" per node
ns_of() { echo "${NODES[$1]%%=*}"; }
addr_of() { echo "${NODES[$1]#*=}"; }
# rank r on node r/2, port 29500 + r%2 (each node is a fresh namespace: the ports are free)
PEERS="$(addr_of 0):29500,$(addr_of 0):29501,$(addr_of 1):29500,$(addr_of 1):29501"

run() {   # run NAME ENVLIST OUTFILE
  local name=$1 envs=$2 out=$3 pids=() be r
  local bvar="BACKEND_${name//[^A-Za-z0-9_]/_}"
  be=${!bvar:-$name}
  local envargs=() nodes=()
  [ "$be" = hier ] && nodes=(--nodes node-0,node-0,node-1,node-1)
  [ -n "$envs" ] && IFS=, read -r -a envargs <<<"$envs"
  for r in 3 2 1; do
    ip netns exec "$(ns_of $((r / 2)))" env "${envargs[@]}" timeout 600 "$W" bench --backend "$be" --world 4 --rank "$r" \
       --peers "$PEERS" "${nodes[@]}" --timeout 120 "${ARGS[@]}" >/dev/null 2>>"$out.err" &
    pids+=($!)
  done
  ip netns exec "$(ns_of 0)" env "${envargs[@]}" timeout 600 "$W" bench --backend "$be" --world 4 --rank 0 \
     --peers "$PEERS" "${nodes[@]}" --timeout 120 "${ARGS[@]}" >>"$out" 2>>"$out.err" || echo "# FAILED rc=$?" >>"$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
}

{
  echo "# Topology: allreduce across namespaced nodes (bench/topo/run.sh)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), kernel $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo "Load average at start: $(cut -d' ' -f1-3 /proc/loadavg). Command: \`RM_BIN=bin QUICK=${QUICK:-1} LINK=$LINK bench/topo/run.sh\`."
  echo "2 nodes x 2 ranks (ranks 0,1 on node-0; 2,3 on node-1), each node a network namespace on a bridge;"
  echo "inter-node link: tbf $(tc -n "$KUBESIM_NETNS_FABRIC" qdisc show dev vh0 | grep -o 'rate [^ ]*' || echo unshaped) each way,"
  if [ "${KUBESIM_NODE_DELAY_APPLIED:-0}" = 1 ]; then echo "netem delay ${LINK#*,} per link."
  else echo "no delay (this kernel has no sch_netem: only the rate is shaped)."; fi
  echo "A flat ring's busbw cannot exceed the link rate (each node link carries 2(n-1)/n of the buffer)."
} >"$RAW/report"
for v in ${TOPO_VARIANTS:-ring hier}; do
  name=${v%%:*}; envs=""
  [ "$name" != "$v" ] && envs=${v#*:}
  echo "== 2x2 ranks: $name${envs:+ ($envs)}"
  run "$name" "$envs" "$RAW/$name"
  cat "$RAW/$name"
  { echo; echo "## $name${envs:+ ($envs)}"; echo; echo '```'; cat "$RAW/$name"; echo '```'; } >>"$RAW/report"
done
echo "" >>"$RAW/report"
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$RAW/report"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done || true
mkdir -p "$(dirname "$OUT")"
cp "$RAW/report" "$OUT"
cat "$OUT"
