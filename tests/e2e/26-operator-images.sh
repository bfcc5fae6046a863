#!/usr/bin/env bash
# e2e-host: podman containers
# 26-operator-images: the whole path with images (docs/architecture.md#building-on-a-fresh-machine).
# kubesim runs pods as podman containers (--runtime podman) behind a TLS front (the operator's
# in-cluster client speaks only HTTPS and verifies the service account's ca.crt):
#  1. `kubectl apply -f deploy/`, then one Pod from the operator Deployment's own template (kubesim
#     has no Deployment controller: this test plays it): ringmaster/operator:latest as UID 65532 with
#     a read-only root, the service account token mounted, in-cluster config, the readiness probe on
#     /readyz (leader election on) gating Ready;
#  2. deploy/examples/fashion-mnist.yaml with the CPU worker image (ringmaster/worker:cpu, read-only
#     root, a PVC at /checkpoints, an emptyDir /tmp), workers reaching the rendezvous through the
#     operator Service's name; one worker container is killed with `podman kill` mid-run and the
#     group must recover (RM_E2E_KILL=0 leaves the kill out); Succeeded with test accuracy >= 0.88
#     (the example's 10 epochs, unchanged);
#  3. a plain PyTorch DDP image (Debian's python3-torch, tests/images/torch-ddp/ddp.py reading only
#     MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, Gloo) trains to Succeeded through the same operator,
#     MASTER_ADDR being the headless Service's name of rank 0.
# e2e-timeout: 1800
# (building the three images on a machine with an empty podman cache took 430-830 s under load.)
# Images are built with scripts/images.sh when missing (cached by podman; needs the apt mirror).
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_need kubectl "$KS_KUBECTL_WHY"
ks_need openssl "Debian package openssl"
ks_need_podman
t_start=$(date +%s)
PY=/usr/bin/python3
need_image() { # TARGET IMAGE: (re)build from this tree; podman's layer cache makes an unchanged tree take seconds
  local t0=$(date +%s)
  "$RM_ROOT/scripts/images.sh" "$1" > "$KS_TMP/build-$1.log" 2>&1 \
    || { tail -5 "$KS_TMP/build-$1.log"; echo "SKIP: image $2 could not be built here (make images IMAGES=\"operator worker-cpu torch\"; the apt mirror is needed when the package layers are not cached)"; exit 0; }
  echo "image $2 built from this tree in $(( $(date +%s) - t0 )) s: $(grep "^images: $2" "$KS_TMP/build-$1.log" | head -1)"
}
need_image operator ringmaster/operator:latest
need_image worker-cpu ringmaster/worker:cpu
echo "images ready after $(( $(date +%s) - t_start )) s"

# ---- kubesim in container mode behind a TLS front (testlib.sh) -------------------------------------
ks_start_podman_tls
cd "$KS_TMP"
ok "kubesim in container mode behind TLS at https://127.0.0.1:$KUBESIM_SERVICE_PORT"

ctr_logs() { k -n "$1" logs "$2" 2>&1 | tail -n "${3:-30}"; }
pod_ready() { [ "$(k -n "$1" get pod "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
tj() { k get tj "$1" -o jsonpath="$2" 2>/dev/null; }
wait_until() { # SECONDS WHAT CMD...
  local end=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt $end ] || return 1; sleep 1; done
}

# ---- 1. deploy/ and the operator from its image ---------------------------------------------------
k apply -f "$RM_ROOT/deploy/00-namespace.yaml" >/dev/null
k apply -f "$RM_ROOT/deploy/" >/dev/null || fail "kubectl apply -f deploy/"
k wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
k -n ringmaster-system get deployment ringmaster-operator -o json > dep.json
ks_operator_pod_from dep.json ringmaster/worker:cpu > op-pod.json
k apply -f op-pod.json >/dev/null || fail "create the operator pod"
wait_until 120 "operator Ready" pod_ready ringmaster-system ringmaster-operator-0 \
  || fail "operator pod not Ready: $(k -n ringmaster-system get pod ringmaster-operator-0 -o jsonpath='{.status}'; ctr_logs ringmaster-system ringmaster-operator-0)"
ok "operator pod Ready from ringmaster/operator:latest (readiness probe /readyz, leader)"
cname=$("${RM_PODMAN[@]}" ps --filter label=io.kubesim.pod=ringmaster-system/ringmaster-operator-0 --format '{{.Names}}' | head -1)
[ -n "$cname" ] || fail "no podman container for the operator pod"
assert_eq "$("${RM_PODMAN[@]}" exec "$cname" id -u)" 65532 "the operator runs as UID 65532"
"${RM_PODMAN[@]}" exec "$cname" sh -c 'touch /x' 2>/dev/null && fail "the operator's root filesystem is writable"
ok "the operator's root filesystem is read-only"
"${RM_PODMAN[@]}" exec "$cname" test -s /var/run/secrets/kubernetes.io/serviceaccount/token || fail "no service account token"
ctr_logs ringmaster-system ringmaster-operator-0 200 | grep -qi "in-cluster\|https://127.0.0.1:$KUBESIM_SERVICE_PORT" \
  && ok "the operator used the in-cluster config (token, ca.crt, KUBERNETES_SERVICE_HOST)" \
  || echo "note: the operator's log does not name its config source"

# ---- 2. Fashion-MNIST with the CPU worker image, a worker killed mid-run ---------------------------
$PY - "$RM_ROOT/deploy/examples/fashion-mnist.yaml" > fm.json <<'P'
import json, sys, yaml
tj = yaml.safe_load(open(sys.argv[1]))
spec = tj["spec"]["template"]["spec"]
c = spec["containers"][0]
c["image"] = "ringmaster/worker:cpu"
c["securityContext"] = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
c["volumeMounts"] = [{"name": "checkpoints", "mountPath": "/checkpoints"}, {"name": "tmp", "mountPath": "/tmp"}]
spec["volumes"] = [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fashion-mnist-checkpoints"}},
                   {"name": "tmp", "emptyDir": {}}]
json.dump(tj, sys.stdout)
P
t_job=$(date +%s)
k apply -f fm.json >/dev/null || fail "apply fashion-mnist"
wait_until 180 "Running" bash -c '[ "$(kubectl get tj fashion-mnist -o jsonpath={.status.phase})" = Running ]' \
  || fail "fashion-mnist not Running: $(k get tj fashion-mnist -o jsonpath='{.status}'); $(ctr_logs default fashion-mnist-worker-0)"
wait_until 300 "step 150" bash -c '[ "$(kubectl get tj fashion-mnist -o jsonpath={.status.progress.step})" -ge 150 ]' \
  || fail "no progress: $(k get tj fashion-mnist -o jsonpath='{.status}'); $(ctr_logs default fashion-mnist-worker-0)"
victim=$("${RM_PODMAN[@]}" ps --filter label=io.kubesim.pod=default/fashion-mnist-worker-1 --format '{{.Names}}' | head -1)
[ -n "$victim" ] || fail "no container for fashion-mnist-worker-1"
"${RM_PODMAN[@]}" exec "$victim" id -u | grep -qx 65532 || fail "the worker does not run as 65532"
ok "the worker runs as UID 65532"
# The kill restores the last checkpoint (every 50 steps; 234 steps per epoch) and the group must go on
# past the next epoch boundary: before the epoch-position fix (docs/architecture.md#robustness) a
# restored mid-epoch checkpoint made every rank break the ring at the epoch's end and re-form forever.
KILL=${RM_E2E_KILL:-1}
if [ "$KILL" = 1 ]; then
  "${RM_PODMAN[@]}" kill "$victim" >/dev/null
  ok "killed worker container $victim at step $(tj fashion-mnist '{.status.progress.step}')"
else
  echo "SKIP (kill leg): RM_E2E_KILL=0"
fi
wait_until 600 "Succeeded" bash -c 'p=$(kubectl get tj fashion-mnist -o jsonpath={.status.phase}); [ "$p" = Succeeded ] || { [ "$p" = Failed ] && exit 0; exit 1; }' \
  || fail "fashion-mnist did not finish: $(k get tj fashion-mnist -o jsonpath='{.status}')"
k get tj fashion-mnist
assert_eq "$(tj fashion-mnist '{.status.phase}')" Succeeded "fashion-mnist Succeeded with the worker image"
restarts=$(tj fashion-mnist '{.status.restarts}'); acc=$(tj fashion-mnist '{.status.result.testAccuracy}')
if [ "$KILL" = 1 ]; then
  [ "${restarts:-0}" -ge 1 ] && ok "the killed worker was recovered ($restarts group restart(s))" || fail "no restart recorded after the kill"
fi
$PY -c "import sys; sys.exit(0 if float('$acc') >= 0.88 else 1)" && ok "test accuracy $acc >= 0.88" || fail "accuracy $acc < 0.88"
echo "fashion-mnist in containers: $(( $(date +%s) - t_job )) s, accuracy $acc, restarts $restarts"
ls "$KS_TMP"/data/pvc/default/fashion-mnist-checkpoints/default/fashion-mnist/ >/dev/null 2>&1 && ok "checkpoints were written to the PVC folder"

# ---- 3. plain PyTorch DDP through the operator --------------------------------------------------
need_image torch ringmaster/torch-ddp:latest
cat > ddp.yaml <<'Y'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: torch-ddp}
spec:
  replicas: 2
  restartPolicy: {maxRestarts: 2, progressDeadlineSeconds: 0}
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/torch-ddp:latest
        securityContext: {readOnlyRootFilesystem: true}
        volumeMounts: [{name: tmp, mountPath: /tmp}]
      volumes: [{name: tmp, emptyDir: {}}]
Y
t_job=$(date +%s)
k apply -f ddp.yaml >/dev/null || fail "apply torch-ddp"
wait_until 400 "torch-ddp done" bash -c 'p=$(kubectl get tj torch-ddp -o jsonpath={.status.phase}); [ "$p" = Succeeded ] || [ "$p" = Failed ]' \
  || fail "torch-ddp did not finish: $(k get tj torch-ddp -o jsonpath='{.status}'); $(ctr_logs default torch-ddp-worker-0)"
out0=$(ctr_logs default torch-ddp-worker-0 40); echo "$out0"
assert_eq "$(tj torch-ddp '{.status.phase}')" Succeeded "the PyTorch DDP job Succeeded through the operator"
assert_contains "$out0" "MASTER_ADDR=torch-ddp-worker-0.torch-ddp" "MASTER_ADDR is rank 0's headless-Service name"
assert_contains "$out0" "WORLD_SIZE=2" "WORLD_SIZE from the operator"
assert_contains "$out0" "weights identical on all ranks: True" "DDP (Gloo) kept the ranks in sync"
echo "torch-ddp: $(( $(date +%s) - t_job )) s"
echo "26-operator-images total: $(( $(date +%s) - t_start )) s"
