# 6x-operator-lib.bash — helpers shared by tests/e2e/6x-operator-*.sh (sourced, not a test: the
# .bash suffix keeps tests/run-e2e.sh from running it). Starts kubesim and operators on loopback
# with free ports, wraps the real kubectl with a private KUBECONFIG and KUBECACHEDIR, and kills
# every process it started on exit (by pid, never by name).
set -euo pipefail
: "${RM_BIN:?RM_BIN must name the binaries folder}"
: "${RM_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
# RM_KUBESIM_NODES=N (optional RM_KUBESIM_NODE_LINK=RATE[,DELAY]): the same test on N nodes that are
# network namespaces: the script re-runs itself under tests/kubesim/netns.sh, inside the
# control-plane namespace (so kubectl, curl, kubesim and the operator share its loopback), kubesim
# gets --nodes N and the operator's rendezvous listens on the control plane's fabric address, which
# the pods on the nodes reach over the bridge. Nothing else in a test changes.
if [ -n "${RM_KUBESIM_NODES:-}" ] && [ -z "${KUBESIM_NETNS_CP:-}" ]; then
  exec "$RM_ROOT/tests/kubesim/netns.sh" run --nodes "$RM_KUBESIM_NODES" \
       ${RM_KUBESIM_NODE_LINK:+--node-link "$RM_KUBESIM_NODE_LINK"} -- bash "$0" "$@"
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/rm-op-e2e.XXXXXX")
export KUBECONFIG="$T/kubeconfig" KUBECACHEDIR="$T/kcache"
PIDS=()
PY=/usr/bin/python3

log() { echo "[$(date +%H:%M:%S)] $*"; }
fail() { echo "FAIL: $*" >&2; dump_logs; exit 1; }
dump_logs() {
  for f in "$T"/*.log; do [ -f "$f" ] || continue; echo "---- $f (tail)"; tail -n 40 "$f"; done >&2
  # the workers' own output (kubesim keeps container logs in its data dir)
  local d
  d=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" 2>/dev/null | head -1 | cut -d= -f2) || true
  if [ -n "$d" ] && [ -d "$d/logs" ]; then
    for f in "$d"/logs/*/*.log; do [ -f "$f" ] || continue; echo "---- worker $f (tail)"; tail -n 12 "$f"; done >&2
  fi
}
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ $rc -ne 0 ] && dump_logs || true
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
# Every user of this library drives kubesim with the real kubectl, which a fresh Debian lacks.
command -v kubectl >/dev/null 2>&1 || {
  echo "SKIP: kubectl is not installed (the real kubectl is not in Debian bookworm; install kubectl, e.g. the Cloud SDK's, to run this test)"
  exit 0; }

free_port() { "$RM_ROOT/tests/e2e/free-port.py"; }   # below the ephemeral range: see there

# wait_for SECONDS DESCRIPTION COMMAND... : poll every 0.2 s until COMMAND succeeds.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$(( $(date +%s) + secs ))
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && fail "timed out after ${secs}s waiting for: $what"
    sleep 0.2
  done
}

# start_kubesim [extra args...]: sets KS_URL, KS_PID
start_kubesim() {
  "$RM_BIN/kubesim" --addr 127.0.0.1:0 --kubeconfig-out "$KUBECONFIG" \
     --image-map "ringmaster/worker=$RM_BIN/ringmaster-worker" ${KUBESIM_NETNS_CP:+--nodes "$RM_KUBESIM_NODES"} \
     "$@" >"$T/kubesim.log" 2>&1 &
  KS_PID=$!; PIDS+=("$KS_PID")
  local i
  for i in $(seq 1 100); do
    KS_URL=$(grep -o 'kubesim listening on http://127.0.0.1:[0-9]*' "$T/kubesim.log" 2>/dev/null | head -1 | sed 's/kubesim listening on //') || true
    [ -n "${KS_URL:-}" ] && [ -s "$KUBECONFIG" ] && break
    sleep 0.1
  done
  [ -n "${KS_URL:-}" ] || fail "kubesim did not start"
  log "kubesim at $KS_URL"
}

k() { kubectl "$@"; }

install_crd() {
  k apply -f "$RM_ROOT/deploy/crd/" >/dev/null
  k wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
}

# start_operator NAME [extra args...]: sets OP_PID_<NAME>, OP_PROBE_<NAME>, OP_METRICS_<NAME>
start_operator() {
  local name=$1; shift
  local mport pport
  # one call for both: its ports are distinct (two calls once drew the same port for both in CI)
  local ports; ports=($("$RM_ROOT/tests/e2e/free-port.py" 2)); mport=${ports[0]}; pport=${ports[1]}
  "$RM_BIN/ringmaster" operator --kubeconfig "$KUBECONFIG" \
     --metrics-bind-address "127.0.0.1:$mport" --health-probe-bind-address "127.0.0.1:$pport" \
     --rendezvous-bind-address "${KUBESIM_CP_ADDR:-127.0.0.1}:${RDZV_PORT:?}" --workers 4 \
     --worker-metrics-port 0 "$@" >>"$T/operator-$name.log" 2>&1 &
  # (--worker-metrics-port 0: pod IPs of two kubesims running at once can coincide on one host)
  local pid=$!; PIDS+=("$pid")
  eval "OP_PID_$name=$pid OP_METRICS_$name=$mport OP_PROBE_$name=$pport"
  log "operator $name pid=$pid metrics=:$mport probes=:$pport"
}

metric() {  # metric PORT NAME_REGEX → sum of matching samples
  curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v re="$2" '$1 ~ re {s+=$2} END {print s+0}'
}

tj_field() { k get tj "$1" -o "jsonpath=$2" 2>/dev/null; }
tj_phase_is() { [ "$(tj_field "$1" '{.status.phase}')" = "$2" ]; }
pod_count() { k get pods -l "ringmaster.dev/job-name=$1" --no-headers 2>/dev/null | grep -c . || true; }

# A small fast job: N workers, MLP [$HIDDEN] (default 128), 1 epoch, checkpoints in $T/ckpt.
# KEEP_PODS=1 adds runPolicy.cleanPodPolicy None: the pods outlive the job (it trains for seconds), so a
# test can read them however slow the machine is; deleting the job removes them (ownerReferences).
fast_job() {  # fast_job NAME WORKERS [EPOCHS] [EXTRA_ENV_YAML]
  local name=$1 n=$2 epochs=${3:-1} env=${4:-} keep=
  [ -n "${KEEP_PODS:-}" ] && keep="  runPolicy: {cleanPodPolicy: None}"
  mkdir -p "$T/ckpt/default/$name"   # stands in for the shared volume a cluster would mount
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $name
spec:
$keep
  replicas: $n
  backend: ring
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 50}
  training:
    mode: train
    model: {type: mlp, hidden: [${HIDDEN:-128}]}
    epochs: $epochs
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
$env
YAML
}
