# lib.bash — shared by bench/operator/*.sh: a kubesim with the kubelet off and one operator
# (start_all), teardown (cleanup), a quantile from a Prometheus histogram (hist_q).
# The caller sets ROOT, RM_BIN, QPS, BURST, OP_WORKERS, POD_EVENTS and may set OP_ARGS (extra
# operator flags) and KS_ARGS (kubesim's kubelet flags instead of --no-kubelet: scale.sh's SWARM=1
# passes --runtime swarm).
T=$(mktemp -d /tmp/rm-bench-op.XXXXXX)
export KUBECONFIG=$T/kubeconfig KUBECACHEDIR=$T/kcache
PIDS=()
# (kubesim with a kubelet stops its pods first: up to 3 s before the SIGKILL)
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 30); do
    alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start_all() {
  "$RM_BIN/kubesim" --addr 127.0.0.1:0 --kubeconfig-out "$KUBECONFIG" ${KS_ARGS:---no-kubelet} >"$T/kubesim.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q 'kubesim listening' "$T/kubesim.log" 2>/dev/null && [ -s "$KUBECONFIG" ] && break; sleep 0.1; done
  KS_URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/kubesim.log" | head -1)
  kubectl apply -f "$ROOT/deploy/crd/" >/dev/null
  kubectl wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
  MPORT=$(port)
  ${OP_WRAP:-} "$RM_BIN/ringmaster" operator --kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:$MPORT \
     --health-probe-bind-address 127.0.0.1:0 --rendezvous-bind-address 127.0.0.1:$(port) \
     --workers "$OP_WORKERS" --kube-api-qps "$QPS" --kube-api-burst "$BURST" --pod-events "$POD_EVENTS" \
     --log-level info ${OP_ARGS:-} >"$T/operator.log" 2>&1 &
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

