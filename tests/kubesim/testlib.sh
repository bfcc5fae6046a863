# testlib.sh — shared by tests/e2e/2x-kubesim-*.sh: start bin/kubesim on a free port with its own
# kubeconfig and kubectl discovery cache (rule A3), stop it (and its pods) on exit, assertions.
# Usage: . "$RM_ROOT/tests/kubesim/testlib.sh"; ks_start [kubesim args...]
set -u
RM_ROOT="${RM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
RM_BIN="${RM_BIN:-$RM_ROOT/bin}"
KS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kubesim-test.XXXXXX")
export KUBECONFIG="$KS_TMP/kubeconfig" KUBECACHEDIR="$KS_TMP/kubecache"
KS_PID=""
KS_URL=""
KS_BG_PIDS=()

ks_cleanup() {
  local p
  # (|| true: a script sourcing this under set -e must not turn an already-gone pid into a failure)
  for p in "${KS_BG_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  if [ -n "$KS_PID" ] && kill -0 "$KS_PID" 2>/dev/null; then
    kill -TERM "$KS_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$KS_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$KS_PID" 2>/dev/null || true
  fi
  rm -rf "$KS_TMP"
}
trap ks_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [ -f "$KS_TMP/kubesim.err" ] && { echo "--- kubesim stderr (tail) ---" >&2; tail -n 30 "$KS_TMP/kubesim.err" >&2; }
  exit 1
}
ok() { echo "ok - $*"; }
# ks_need TOOL WHY: a test that needs a tool a fresh Debian machine may lack says SKIP and why.
ks_need() { command -v "$1" >/dev/null 2>&1 || { echo "SKIP: $1 is not installed ($2)"; exit 0; }; }
KS_KUBECTL_WHY="the real kubectl is not in Debian bookworm; install kubectl (e.g. the Cloud SDK's) to run this test"

ks_start() {
  "$RM_BIN/kubesim" --addr 127.0.0.1:0 --kubeconfig-out "$KUBECONFIG" --data-dir "$KS_TMP/data" "$@" \
    >"$KS_TMP/kubesim.out" 2>"$KS_TMP/kubesim.err" &
  KS_PID=$!
  for _ in $(seq 1 100); do
    KS_URL=$(sed -n 's/^kubesim listening on //p' "$KS_TMP/kubesim.out")
    [ -n "$KS_URL" ] && break
    kill -0 "$KS_PID" 2>/dev/null || fail "kubesim exited at start"
    sleep 0.05
  done
  [ -n "$KS_URL" ] || fail "kubesim did not print its address"
  export KS_URL
}

# kubectl with a time limit (every blocking call in a test is bounded)
k() { timeout 30 kubectl "$@"; }

assert_contains() { # haystack needle what
  case "$1" in *"$2"*) ok "$3" ;; *) echo "$1" >&2; fail "$3: expected to contain '$2'" ;; esac
}
assert_eq() { [ "$1" = "$2" ] && ok "$3" || fail "$3: got '$1', want '$2'"; }

# wait_for CMD... : retry a command for up to 20 s
wait_for() {
  local i
  for i in $(seq 1 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

ks_crd_file() {
  if [ -f "$RM_ROOT/deploy/crd/trainingjobs.ringmaster.dev.yaml" ]; then
    echo "$RM_ROOT/deploy/crd/trainingjobs.ringmaster.dev.yaml"
  else
    echo "$RM_ROOT/tests/kubesim/fixtures/trainingjobs.ringmaster.dev.yaml"
  fi
}

# ks_need_podman [IMAGE...]: SKIP unless podman can run containers here and the images exist
# (the Debian base is made with mmdebstrap when missing; ringmaster's images come from `make images`).
ks_need_podman() {
  . "$RM_ROOT/scripts/podman-lib.sh"
  local why img
  why=$(rm_podman_why_not) || { echo "SKIP: podman cannot run containers here: $why"; exit 0; }
  rm_ensure_base >/dev/null 2>&1 || { echo "SKIP: no Debian base image and mmdebstrap could not make one (make images)"; exit 0; }
  for img in "$@"; do
    "${RM_PODMAN[@]}" image exists "$img" || { echo "SKIP: image $img is missing (make images)"; exit 0; }
  done
}

# ks_start_podman_tls [kubesim args...]: kubesim with --runtime podman behind a TLS front
# (tests/kubesim/tlsfront.py, a throwaway CA in $KS_TMP): kubectl talks plain HTTP to kubesim, and
# every container gets KUBERNETES_SERVICE_HOST/PORT = the front and the CA as its token's ca.crt,
# so in-cluster clients (the operator) verify TLS as on a cluster. Needs openssl.
ks_start_podman_tls() {
  local d="$KS_TMP/tls" port
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 -subj /CN=kubesim-ca >/dev/null 2>&1 || fail "openssl CA"
  printf 'subjectAltName=IP:127.0.0.1,DNS:kubernetes.default.svc\n' > "$d/san.ext"
  openssl req -newkey rsa:2048 -nodes -keyout "$d/srv.key" -out "$d/srv.csr" -subj /CN=kubernetes >/dev/null 2>&1 || fail "openssl key"
  openssl x509 -req -in "$d/srv.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -out "$d/srv.crt" -days 2 \
    -extfile "$d/san.ext" >/dev/null 2>&1 || fail "openssl cert"
  port=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()')
  /usr/bin/python3 "$RM_ROOT/tests/kubesim/tlsfront.py" "$port" "$d/srv.crt" "$d/srv.key" > "$d/port" 2> "$d/err" &
  KS_BG_PIDS+=($!)
  local _
  for _ in $(seq 1 100); do [ -s "$d/port" ] && break; sleep 0.1; done
  [ -s "$d/port" ] || fail "TLS front did not start: $(cat "$d/err")"
  export KUBESIM_SERVICE_HOST=127.0.0.1 KUBESIM_SERVICE_PORT=$(cat "$d/port") KUBESIM_SERVICE_CA="$d/ca.crt"
  ks_start --runtime podman --addr "127.0.0.1:$port" "$@"
  curl -sf --cacert "$d/ca.crt" "https://127.0.0.1:$KUBESIM_SERVICE_PORT/version" | grep -q gitVersion \
    || fail "the TLS front does not reach kubesim"
}

# ks_operator_pod_from DEPLOYMENT_JSON WORKER_IMAGE > POD_JSON: what the Deployment controller would
# create (kubesim has none): one Pod from the Deployment's template, named <deployment>-0, with
# --worker-image pointed at WORKER_IMAGE (no CUDA worker image can be built here).
ks_operator_pod_from() {
  /usr/bin/python3 - "$1" "$2" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["spec"]["template"]
spec = t["spec"]
c = spec["containers"][0]
c["args"] = [a if not a.startswith("--worker-image=") else "--worker-image=" + sys.argv[2] for a in c.get("args", [])]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": d["metadata"]["name"] + "-0", "namespace": d["metadata"]["namespace"],
                    "labels": t["metadata"]["labels"], "annotations": t["metadata"].get("annotations", {})},
       "spec": spec}
json.dump(pod, sys.stdout)
P
}
