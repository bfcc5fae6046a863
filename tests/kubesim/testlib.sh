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
  for p in "${KS_BG_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  if [ -n "$KS_PID" ] && kill -0 "$KS_PID" 2>/dev/null; then
    kill -TERM "$KS_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$KS_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$KS_PID" 2>/dev/null
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
