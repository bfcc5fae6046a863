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
source "$ROOT/bench/operator/lib.bash"

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
