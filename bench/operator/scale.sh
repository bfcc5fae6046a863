#!/usr/bin/env bash
# scale.sh — the operator at many jobs (docs/operator-scale.md), on kubesim with the kubelet off:
#   1) JOBS (default 10000) TrainingJobs x WORKERS (10) created at once, then every pod made
#      Running and Ready by load.py (a kubelet without processes: nobody reports progress, so the
#      fleet is idle once the operator has caught up): the time to all pods, the operator's RSS and
#      heap holding it all, its API writes in an idle minute (IDLE_S), one job's change (suspend)
#      reconciled — PATCH to its Suspended condition on a watch — p50/p99 over CHANGES changes while
#      the others idle;
#   2) BIG_JOBS (1000) x BIG_WORKERS (100) pods from cold against the ceiling: the same number of
#      bare POSTs of the operator's own pod (one it created, renamed) straight to a fresh kubesim by
#      curl --parallel (C, 16 at once; no operator), and by load.py's 16 Python threads, in the same
#      run.
# Writes a markdown report to stdout. Env: RM_BIN, JOBS, WORKERS, BIG_JOBS, BIG_WORKERS, IDLE_S (60),
# CHANGES (20), QPS/BURST (the operator's client limiter; 5000/5000 so the creation burst is not
# limited by design), OP_WORKERS (8), POD_EVENTS (true).
# SWARM=1: part 1's fleet runs under kubesim's swarm runtime instead of load.py's fake Running
# (kubesim --runtime swarm: every pod a simulated worker in one `ringmaster-worker swarm --kubelet`
# process, joining the operator's rendezvous and reporting progress every SWARM_REPORT_S (5) s with
# its steps advancing, for SWARM_STEPS (10^9, i.e. until the end) steps of SWARM_STEP_S (1) s), so
# the operator's numbers include real rendezvous traffic and the status writes progress makes: the
# "idle" minute is then a training minute. JOBS defaults to 150 there (1,500 workers): the
# operator's rendezvous serves at most 2,048 connections (rm_http_opts.max_conns, common/rdzv.c)
# and every simulated worker keeps one open, as a pod would; the swarm and kubesim's loopback
# addresses hold at most 60,000. Parts 2 and 3 keep the kubelet off either way.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RM_BIN=${RM_BIN:-$ROOT/bin}
SWARM=${SWARM:-0}
JOBS=${JOBS:-$([ "$SWARM" = 1 ] && echo 1000 || echo 10000)}; WORKERS=${WORKERS:-10}; BIG_JOBS=${BIG_JOBS:-1000}; BIG_WORKERS=${BIG_WORKERS:-100}
IDLE_S=${IDLE_S:-60}; CHANGES=${CHANGES:-20}
QPS=${QPS:-5000}; BURST=${BURST:-5000}; OP_WORKERS=${OP_WORKERS:-8}; POD_EVENTS=${POD_EVENTS:-true}
source "$ROOT/bench/operator/lib.bash"
LOAD="/usr/bin/python3 $ROOT/bench/operator/load.py"
ulimit -n 16384 2>/dev/null || true
# The ceiling in C: curl's parallel mode (libcurl multi, 16 transfers at once on kept-alive
# connections) posting N copies of the operator's pod (generateName, so one body serves them all).
# Prints load.py raw's JSON, with "failed": the POSTs not answered 201.
raw_curl() { # URL N TEMPLATE
  local d t0 t1 ok
  d=$(mktemp -d /tmp/rm-bench-raw.XXXXXX)
  /usr/bin/python3 - "$3" "$d/body.json" <<'PY'
import json, sys
tp = json.load(open(sys.argv[1]))
body = {"apiVersion": "v1", "kind": "Pod", "spec": tp["spec"],
        "metadata": {"generateName": "rawc-", "labels": dict(tp["metadata"].get("labels", {}), raw="1"),
                     "annotations": tp["metadata"].get("annotations", {})}}
body["spec"].pop("nodeName", None)
open(sys.argv[2], "w").write(json.dumps(body))
PY
  awk -v u="$1/api/v1/namespaces/default/pods" -v n="$2" -v b="$d/body.json" 'BEGIN {
    for (i = 0; i < n; i++) {
      if (i) print "next"
      printf "url = \"%s\"\ndata-binary = \"@%s\"\nheader = \"Content-Type: application/json\"\noutput = \"/dev/null\"\nwrite-out = \"%%{http_code}\\n\"\n", u, b
    } }' >"$d/cfg"
  t0=$(date +%s.%N)
  curl -s --parallel --parallel-max 16 -K "$d/cfg" >"$d/codes" 2>"$d/err" || true
  t1=$(date +%s.%N)
  ok=$(grep -c '^201' "$d/codes" || true)
  /usr/bin/python3 -c 'import json,sys; n,ok,dt=int(sys.argv[1]),int(sys.argv[2]),float(sys.argv[3]); print(json.dumps({"pods": ok, "seconds": round(dt, 3), "pods_per_second": round(ok / dt, 1), "failed": n - ok}))' "$2" "$ok" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')"
  rm -rf "$d"
}
jf() { /usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
rss() { awk '/VmRSS/ {r=$2} /VmHWM/ {h=$2} END {printf "%.1f MiB (peak %.1f MiB)", r/1024, h/1024}' "/proc/$1/status"; }

if [ "$SWARM" = 1 ]; then
  [ $((JOBS * WORKERS)) -le 60000 ] || { echo "scale.sh: SWARM=1 runs at most 60,000 pods (JOBS x WORKERS = $((JOBS * WORKERS)))" >&2; exit 2; }
  [ $((JOBS * WORKERS)) -le 16000 ] || echo "scale.sh: $((JOBS * WORKERS)) workers: more than the operator's rendezvous holds connections for (16,384 + 256 within its open files)" >&2
  KS_ARGS="--runtime swarm --swarm-program $RM_BIN/ringmaster-worker"
  export KUBESIM_SWARM_ARGS="--steps ${SWARM_STEPS:-1000000000} --step ${SWARM_STEP_S:-1} --report ${SWARM_REPORT_S:-5}"
fi
start_all
KS_PID=${PIDS[0]}
FLEET=$($LOAD fleet "$KS_URL" "$JOBS" "$WORKERS")
if [ "$SWARM" = 1 ]; then
  # kubesim's kubelet hands every pod to the swarm; the workers join and train until the end
  RUN=$($LOAD wait-running "$KS_URL" $((JOBS * WORKERS)) 600)
  RUN_ROW="every pod Running and Ready under the swarm runtime"
  SETTLE="not waited for: the jobs train (SWARM=1)"
  KS_ARGS=--no-kubelet   # parts 2 and 3: pod creation only
else
  RUN=$($LOAD running "$KS_URL")
  RUN_ROW="every pod made Running by load.py"
  # catch up: the operator sees every pod Running, writes each job's status once; wait until a
  # 10 s window has no write (at most 300 s)
  settle_t0=$(date +%s); SETTLE="not settled after 300 s"
  while [ $(( $(date +%s) - settle_t0 )) -lt 300 ]; do
    w=$($LOAD idle "$KS_URL" 10)
    if [ "$(jf "$w" 'o["writes"]')" = 0 ]; then SETTLE="settled $(( $(date +%s) - settle_t0 )) s after the pods ran"; break; fi
  done
fi
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
TPL=$(mktemp /tmp/rm-bench-pod.XXXXXX.json)
kubectl get pod "bench-0000-worker-0" -o json >"$TPL"   # the ceiling posts the operator's own pod
cleanup; PIDS=(); T=$(mktemp -d /tmp/rm-bench-op.XXXXXX); export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
start_all
RAW=$($LOAD raw "$KS_URL" $((BIG_JOBS * BIG_WORKERS)) "$TPL")
cleanup; PIDS=(); T=$(mktemp -d /tmp/rm-bench-op.XXXXXX); export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
start_all
RAWC=$(raw_curl "$KS_URL" $((BIG_JOBS * BIG_WORKERS)) "$TPL")
POD_BYTES=$(/usr/bin/python3 -c 'import json,sys; print(len(json.dumps(json.load(open(sys.argv[1])))))' "$TPL")
rm -f "$TPL"

cat <<EOF
### $JOBS jobs x $WORKERS workers ($(jf "$FLEET" 'o["pods"]') pods), $([ "$SWARM" = 1 ] && echo "training under the swarm runtime (SWARM=1: $KUBESIM_SWARM_ARGS)" || echo idle)

| metric | ringmaster | target |
|---|---|---|
| all pods created | $(jf "$FLEET" 'o["all_pods_seconds"]') s ($(jf "$FLEET" 'o["pods_per_second"]') pods/s; job → its pods p50 $(jf "$FLEET" 'o["job_to_all_pods_p50_ms"]') ms, p99 $(jf "$FLEET" 'o["job_to_all_pods_p99_ms"]') ms) | — |
| $RUN_ROW | $(jf "$RUN" 'o["seconds"]') s; operator $SETTLE | — |
| operator RSS holding it all | $OP_RSS | ≤ 256 MiB |
| operator heap (SIGUSR1) | ${MEM:-n/a} | — |
| kubesim RSS (the API server double) | $KS_RSS | — |
| API writes in $([ "$SWARM" = 1 ] && echo "a training" || echo "an idle") ${IDLE_S} s | $(jf "$IDLE" 'o["writes"]') ($(jf "$IDLE" 'o["writes_by"]')); reads $(jf "$IDLE" 'o["reads"]') ($(jf "$IDLE" 'o["reads_by"]')) | 0 writes per idle minute |
| one job's suspend → its Suspended condition, others idle | p50 $(jf "$CHG" 'o["p50_ms"]') ms, p99 $(jf "$CHG" 'o["p99_ms"]') ms, max $(jf "$CHG" 'o["max_ms"]') ms ($(jf "$CHG" 'o["observed"]')/$CHANGES observed) | ≤ 100 ms p99 |
| ringmaster_reconcile_seconds over the run | p50 $RP50, p99 $RP99 | — |

### $BIG_JOBS jobs x $BIG_WORKERS workers from cold, against bare POSTs

| | time | pods/s |
|---|---|---|
| ringmaster: all $(jf "$BIG" 'o["pods"]') pods (job → its pods p50 $(jf "$BIG" 'o["job_to_all_pods_p50_ms"]') ms, p99 $(jf "$BIG" 'o["job_to_all_pods_p99_ms"]') ms; operator RSS $BIG_RSS) | $(jf "$BIG" 'o["all_pods_seconds"]') s | $(jf "$BIG" 'o["pods_per_second"]') |
| ceiling: $(jf "$RAWC" 'o["pods"]') bare POSTs of the operator's pod (~$POD_BYTES bytes of JSON) by curl --parallel (C, 16 at once, keep-alive), no operator$(jf "$RAWC" '"; %d not answered 201" % o["failed"] if o["failed"] else ""') | $(jf "$RAWC" 'o["seconds"]') s | $(jf "$RAWC" 'o["pods_per_second"]') |
| the same from load.py raw (Python, 16 threads) | $(jf "$RAW" 'o["seconds"]') s | $(jf "$RAW" 'o["pods_per_second"]') |

Operator flags: --workers $OP_WORKERS --kube-api-qps $QPS --kube-api-burst $BURST --pod-events $POD_EVENTS (resync every 30 s, the default).
EOF
