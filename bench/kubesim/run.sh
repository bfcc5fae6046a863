#!/usr/bin/env bash
# bench/kubesim/run.sh — kubesim write throughput and watch fan-out (runnable alone).
# Builds bench/kubesim/ksload.c (a C keep-alive load generator), and for each scenario starts a
# fresh bin/kubesim --no-kubelet and measures:
#   http-ceiling GET /version/s: the HTTP layer's own limit (no store, no JSON parse)
#   create      creates/s, no watches
#   patch       merge-patches/s, no watches
#   idle-1000   merge-patches/s with 1,000 watches open in another namespace
#   selector-1000 merge-patches/s with 1,000 watches in the same namespace whose label selector
#               matches none of the written objects (woken per commit, selector per event)
#   fanout-1000 merge-patches/s with 1,000 watches that each receive every event
# Env: SECS (default 5), THREADS (writer connections, default 4), RM_BIN.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
secs="${SECS:-5}"
T=${THREADS:-4}
out="$root/build/bench"
mkdir -p "$out"
cc -O2 -pthread -o "$out/ksload" "$root/bench/kubesim/ksload.c"
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
start() {
  rm -rf "$tmp/d"; : >"$tmp/out"
  "$bin/kubesim" --no-kubelet --addr 127.0.0.1:0 --kubeconfig-out "$tmp/kc" --data-dir "$tmp/d" --log-level warn >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 1 50); do grep -q listening "$tmp/out" && break; sleep 0.1; done
  port=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/out")
  api="http://127.0.0.1:$port"
  for n in bench idle; do
    curl -sf -XPOST -H 'Content-Type: application/json' "$api/api/v1/namespaces" -d "{\"metadata\":{\"name\":\"$n\"}}" >/dev/null
  done
  for i in $(seq 0 $((T - 1))); do
    curl -sf -XPOST -H 'Content-Type: application/json' "$api/api/v1/namespaces/bench/configmaps" \
      -d "{\"metadata\":{\"name\":\"p$i\",\"labels\":{\"app\":\"bench\"}},\"data\":{}}" >/dev/null
  done
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
run() { # name watches watch_ns mode [label selector of the watches, URL-encoded]
  start
  local r; r=$(KSLOAD_SELECTOR="${5:-}" "$out/ksload" "$port" "$T" "$secs" "$2" "$3" "$4")
  echo "scenario=$1 $r kubesim_rss_kib=$(awk '/VmRSS/{print $2}' /proc/$pid/status)"
  stop
}
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine makes these numbers noisy)"
echo "# kubesim bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%FT%TZ)"
run http-ceiling 0 bench version
run create 0 bench create
run patch 0 bench patch
run idle-1000 1000 idle patch
run selector-1000 1000 bench patch 'app%3Dother'
run fanout-1000 1000 bench patch
