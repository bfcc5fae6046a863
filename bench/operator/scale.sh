#!/usr/bin/env bash
# scale.sh — the operator at many jobs (docs/operator-scale.md), on kubesim with the kubelet off:
#   1) JOBS (default 10000) TrainingJobs x WORKERS (10) created at once, then every pod made
#      Running and Ready by load.py (a kubelet without processes: nobody reports progress, so the
#      fleet is idle once the operator has caught up): the time to all pods, the operator's RSS and
#      heap holding it all, its API writes in an idle minute (IDLE_S), one job's change (suspend)
#      reconciled — PATCH to its Suspended condition on a watch — p50/p99 over CHANGES changes while
#      the others idle;
#   2) BIG_JOBS (1000) x BIG_WORKERS (100) pods from cold against the ceiling: the same number of
#      bare pod POSTs straight to kubesim (16 client threads, no operator) in the same run.
# Writes a markdown report to stdout. Env: RM_BIN, JOBS, WORKERS, BIG_JOBS, BIG_WORKERS, IDLE_S (60),
# CHANGES (20), QPS/BURST (the operator's client limiter; 5000/5000 so the creation burst is not
# limited by design), OP_WORKERS (8), POD_EVENTS (true).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RM_BIN=${RM_BIN:-$ROOT/bin}
JOBS=${JOBS:-10000}; WORKERS=${WORKERS:-10}; BIG_JOBS=${BIG_JOBS:-1000}; BIG_WORKERS=${BIG_WORKERS:-100}
IDLE_S=${IDLE_S:-60}; CHANGES=${CHANGES:-20}
QPS=${QPS:-5000}; BURST=${BURST:-5000}; OP_WORKERS=${OP_WORKERS:-8}; POD_EVENTS=${POD_EVENTS:-true}
source "$ROOT/bench/operator/lib.bash"
LOAD="/usr/bin/python3 $ROOT/bench/operator/load.py"
ulimit -n 16384 2>/dev/null || true
jf() { /usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
rss() { awk '/VmRSS/ {r=$2} /VmHWM/ {h=$2} END {printf "%.1f MiB (peak %.1f MiB)", r/1024, h/1024}' "/proc/$1/status"; }

start_all
KS_PID=${PIDS[0]}
FLEET=$($LOAD fleet "$KS_URL" "$JOBS" "$WORKERS")
RUN=$($LOAD running "$KS_URL")
# catch up: the operator sees every pod Running, writes each job's status once; wait until a
# 10 s window has no write (at most 300 s)
settle_t0=$(date +%s); SETTLE="not settled after 300 s"
while [ $(( $(date +%s) - settle_t0 )) -lt 300 ]; do
  w=$($LOAD idle "$KS_URL" 10)
  if [ "$(jf "$w" 'o["writes"]')" = 0 ]; then SETTLE="settled $(( $(date +%s) - settle_t0 )) s after the pods ran"; break; fi
done
kill -USR1 "$OP_PID"; sleep 0.6
MEM=$(grep 'heap_bytes=' "$T/operator.log" | tail -1 | sed 's/.*msg="memory" //; s/ src=.*//' || true)
OP_RSS=$(rss "$OP_PID"); KS_RSS=$(rss "$KS_PID")
IDLE=$($LOAD idle "$KS_URL" "$IDLE_S")
CHG=$($LOAD change "$KS_URL" "$JOBS" "$CHANGES")
RP50=$(hist_q ringmaster_reconcile_seconds 0.5); RP99=$(hist_q ringmaster_reconcile_seconds 0.99)

cleanup; PIDS=(); T=$(mktemp -d /tmp/rm-bench-op.XXXXXX); export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
start_all
BIG=$($LOAD fleet "$KS_URL" "$BIG_JOBS" "$BIG_WORKERS")
BIG_RSS=$(rss "$OP_PID")
cleanup; PIDS=(); T=$(mktemp -d /tmp/rm-bench-op.XXXXXX); export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
start_all
RAW=$($LOAD raw "$KS_URL" $((BIG_JOBS * BIG_WORKERS)))

cat <<EOF
### $JOBS jobs x $WORKERS workers ($(jf "$FLEET" 'o["pods"]') pods), idle

| metric | ringmaster | target |
|---|---|---|
| all pods created | $(jf "$FLEET" 'o["all_pods_seconds"]') s ($(jf "$FLEET" 'o["pods_per_second"]') pods/s; job → its pods p50 $(jf "$FLEET" 'o["job_to_all_pods_p50_ms"]') ms, p99 $(jf "$FLEET" 'o["job_to_all_pods_p99_ms"]') ms) | — |
| every pod made Running by load.py | $(jf "$RUN" 'o["seconds"]') s; operator $SETTLE | — |
| operator RSS holding it all | $OP_RSS | ≤ 256 MiB |
| operator heap (SIGUSR1) | ${MEM:-n/a} | — |
| kubesim RSS (the API server double) | $KS_RSS | — |
| API writes in an idle ${IDLE_S} s | $(jf "$IDLE" 'o["writes"]') ($(jf "$IDLE" 'o["writes_by"]')); reads $(jf "$IDLE" 'o["reads"]') ($(jf "$IDLE" 'o["reads_by"]')) | 0 writes per idle minute |
| one job's suspend → its Suspended condition, others idle | p50 $(jf "$CHG" 'o["p50_ms"]') ms, p99 $(jf "$CHG" 'o["p99_ms"]') ms, max $(jf "$CHG" 'o["max_ms"]') ms ($(jf "$CHG" 'o["observed"]')/$CHANGES observed) | ≤ 100 ms p99 |
| ringmaster_reconcile_seconds over the run | p50 $RP50, p99 $RP99 | — |

### $BIG_JOBS jobs x $BIG_WORKERS workers from cold, against bare POSTs

| | time | pods/s |
|---|---|---|
| ringmaster: all $(jf "$BIG" 'o["pods"]') pods (job → its pods p50 $(jf "$BIG" 'o["job_to_all_pods_p50_ms"]') ms, p99 $(jf "$BIG" 'o["job_to_all_pods_p99_ms"]') ms; operator RSS $BIG_RSS) | $(jf "$BIG" 'o["all_pods_seconds"]') s | $(jf "$BIG" 'o["pods_per_second"]') |
| ceiling: $(jf "$RAW" 'o["pods"]') bare pod POSTs, 16 client threads, no operator | $(jf "$RAW" 'o["seconds"]') s | $(jf "$RAW" 'o["pods_per_second"]') |

Operator flags: --workers $OP_WORKERS --kube-api-qps $QPS --kube-api-burst $BURST --pod-events $POD_EVENTS (resync every 30 s, the default).
EOF
