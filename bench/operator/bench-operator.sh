#!/usr/bin/env bash
# bench-operator.sh — the operator's scale benchmarks on kubesim with the kubelet off:
#   1) JOBS (default 1000) TrainingJobs x WORKERS (8) created at once: pods created per second,
#      per-job create->all-pods latency p50/p99, ringmaster_reconcile_seconds p50/p99 (from the
#      histogram), operator peak RSS (VmHWM);
#   2) `kubectl apply` of one 64-worker job: time to all 64 pods;
#   3) the ceiling: JOBS*WORKERS bare pods POSTed straight to kubesim by 16 client threads.
# Writes a markdown table to stdout (bench/results/operator.md is assembled from it).
# Env: RM_BIN (default ./bin), JOBS, WORKERS, QPS/BURST (client limiter of the operator; default
# 5000/5000), OP_WORKERS (reconcile threads; 8), POD_EVENTS (true).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RM_BIN=${RM_BIN:-$ROOT/bin}
JOBS=${JOBS:-1000}; WORKERS=${WORKERS:-8}; QPS=${QPS:-5000}; BURST=${BURST:-5000}
OP_WORKERS=${OP_WORKERS:-8}; POD_EVENTS=${POD_EVENTS:-true}
T=$(mktemp -d /tmp/rm-bench-op.XXXXXX)
export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.3; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start_all() {
  "$RM_BIN/kubesim" --addr 127.0.0.1:0 --kubeconfig-out "$KUBECONFIG" --no-kubelet >"$T/kubesim.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q 'kubesim listening' "$T/kubesim.log" 2>/dev/null && [ -s "$KUBECONFIG" ] && break; sleep 0.1; done
  KS_URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/kubesim.log" | head -1)
  kubectl apply -f "$ROOT/deploy/crd/" >/dev/null
  kubectl wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
  MPORT=$(port)
  "$RM_BIN/ringmaster" operator --kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:$MPORT \
     --health-probe-bind-address 127.0.0.1:0 --rendezvous-bind-address 127.0.0.1:$(port) \
     --workers "$OP_WORKERS" --kube-api-qps "$QPS" --kube-api-burst "$BURST" --pod-events "$POD_EVENTS" \
     --log-level info >"$T/operator.log" 2>&1 &
  OP_PID=$!; PIDS+=($OP_PID)
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$MPORT/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
  sleep 1
}

hist_q() {  # hist_q METRIC Q  → quantile (linear inside the bucket) from a Prometheus histogram
  curl -fsS "http://127.0.0.1:$MPORT/metrics" | /usr/bin/python3 -c '
import sys,re
name,q=sys.argv[1],float(sys.argv[2]); b=[]
for l in sys.stdin:
    m=re.match(name+r"_bucket\{le=\"([^\"]+)\"\} (\S+)",l)
    if m: b.append((float("inf") if m.group(1)=="+Inf" else float(m.group(1)),float(m.group(2))))
b.sort(); tot=b[-1][1] if b else 0
if not tot: print("n/a"); sys.exit()
want=q*tot; prev_le,prev_c=0.0,0.0
for le,c in b:
    if c>=want:
        v=prev_le if le==float("inf") else prev_le+(le-prev_le)*((want-prev_c)/max(c-prev_c,1e-9))
        print("%.2f ms" % (v*1000)); break
    prev_le,prev_c=le,c
' "$1" "$2"
}

start_all
FLEET=$(/usr/bin/python3 "$ROOT/bench/operator/load.py" fleet "$KS_URL" "$JOBS" "$WORKERS")
sleep 1
kill -USR1 $OP_PID; sleep 0.6
MEM=$(grep 'heap_bytes=' "$T/operator.log" | tail -1 | sed 's/.*msg="memory" //; s/ src=.*//' || true)
RSS=$(awk '/VmHWM/ {h=$2} /RssAnon/ {a=$2} /RssFile/ {f=$2} END {print h" kB (now: anon "a" kB, file "f" kB)"}' /proc/$OP_PID/status)
P50=$(hist_q ringmaster_reconcile_seconds 0.5); P99=$(hist_q ringmaster_reconcile_seconds 0.99)
cleanup; PIDS=(); T=$(mktemp -d /tmp/rm-bench-op.XXXXXX); export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
start_all
BIG=$(/usr/bin/python3 "$ROOT/bench/operator/load.py" big "$KS_URL" 64 kubectl)
RSS2=$(awk '/VmHWM/ {print $2" "$3}' /proc/$OP_PID/status)
RAW=$(/usr/bin/python3 "$ROOT/bench/operator/load.py" raw "$KS_URL" $((JOBS * WORKERS)))
echo "fleet: $FLEET"
echo "reconcile_seconds p50=$P50 p99=$P99 peak_rss=$RSS"
echo "operator memory after the burst: $MEM"
echo "big64: $BIG peak_rss=$RSS2"
echo "ceiling (bare pod POSTs, 16 client threads, no operator): $RAW"
