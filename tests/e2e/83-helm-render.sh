#!/usr/bin/env bash
# e2e-host: podman images
# 83-helm-render: the Helm chart rendered for real (tests/helm-render: Go text/template + sprig +
# Helm's built-ins, values checked against values.schema.json with gojsonschema as Helm does):
#  1. every tests/helm-render/values/ok-*.yaml renders to valid YAML; the defaults render the same
#     operator Deployment args and object set as deploy/ (the chart's stated equivalence);
#  2. every bad-*.yaml fails rendering with the message its first line expects, naming the value
#     (wrong type, missing required value, out of range, unknown key, empty string, nested type);
#     and with the schema removed, the template's own `required` still names a missing workerImage;
#  3. with kubectl: `kubectl apply --dry-run=server` of the rendered chart (CRDs included) creates
#     nothing in kubesim, then a real apply installs it (the CRDs first, as helm does: the training
#     runtimes are of their kinds);
#  4. with podman and the images (else that part says SKIP): kubesim in container mode, the operator
#     pod from the RENDERED Deployment (values ok-images.yaml: the CPU worker image) gets Ready and
#     runs a short TrainingJob to Succeeded.
set -euo pipefail
root=${RM_ROOT:?}
PY=/usr/bin/python3
fail() { echo "FAIL: $*"; exit 1; }
for p in go:golang-go; do command -v "${p%%:*}" >/dev/null || { echo "SKIP: ${p%%:*} not installed (Debian package ${p#*:}; make deps-images)"; exit 0; }; done
for d in github.com/Masterminds/sprig:golang-github-masterminds-sprig-dev sigs.k8s.io/yaml:golang-k8s-sigs-yaml-dev \
         github.com/xeipuuv/gojsonschema:golang-github-xeipuuv-gojsonschema-dev; do
  [ -d "/usr/share/gocode/src/${d%%:*}" ] || { echo "SKIP: Go library ${d%%:*} not installed (Debian package ${d#*:}; make deps-images)"; exit 0; }
done
HR="$root/build/helm-render"
if [ ! -x "$HR" ] || [ "$root/tests/helm-render/main.go" -nt "$HR" ]; then
  t0=$(date +%s)
  mkdir -p "$root/build"
  # GOPATH mode takes a relative package path, never an absolute one
  (cd "$root" && GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="${GOCACHE:-$root/build/go-cache}" \
    go build -o "$HR" ./tests/helm-render) || fail "go build tests/helm-render"
  echo "built helm-render in $(( $(date +%s) - t0 )) s"
fi
CHART="$root/charts/ringmaster"
V="$root/tests/helm-render/values"

echo "== 1. good values render"
for f in "$V"/ok-*.yaml; do
  "$HR" -f "$f" "$CHART" > "$TMPDIR/$(basename "$f").out" || fail "$(basename "$f") did not render"
  $PY -c 'import sys,yaml; docs=[d for d in yaml.safe_load_all(open(sys.argv[1])) if d]; assert docs and all("kind" in d and "apiVersion" in d for d in docs), docs; print(sys.argv[2], len(docs), "objects:", ", ".join(sorted(d["kind"]+"/"+d["metadata"]["name"] for d in docs)))' \
    "$TMPDIR/$(basename "$f").out" "$(basename "$f")" || fail "$(basename "$f") rendered invalid manifests"
done
grep -q "kind: ServiceMonitor" "$TMPDIR/ok-monitoring.yaml.out" || fail "serviceMonitor.enabled rendered no ServiceMonitor"
grep -q -- "--namespace=team-b" "$TMPDIR/ok-monitoring.yaml.out" || fail "watchNamespaces not rendered"
grep -q -- "--leader-elect" "$TMPDIR/ok-monitoring.yaml.out" && fail "leaderElection.enabled=false still passes --leader-elect"
$PY - "$TMPDIR/ok-defaults.yaml.out" "$root/deploy" <<'P' || fail "the chart's defaults differ from deploy/"
import glob, sys, yaml
chart = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
plain = [d for f in sorted(glob.glob(sys.argv[2] + "/[0-9]*.yaml")) + sorted(glob.glob(sys.argv[2] + "/runtimes/*.yaml"))
         for d in yaml.safe_load_all(open(f)) if d]   # (deploy/runtimes/: kubectl apply -f it after deploy/)
key = lambda d: (d["kind"], d["metadata"]["name"])
skip = {"Namespace", "CustomResourceDefinition"}   # helm --create-namespace; crds/ go in apart
a = {key(d): d for d in chart}; b = {key(d): d for d in plain if d["kind"] not in skip}
assert set(a) == set(b), f"objects differ: chart-only {set(a)-set(b)}, deploy-only {set(b)-set(a)}"
ca = a[("Deployment", "ringmaster-operator")]["spec"]["template"]["spec"]["containers"][0]
cb = b[("Deployment", "ringmaster-operator")]["spec"]["template"]["spec"]["containers"][0]
extra = {"--workers=4", "--kube-api-qps=50", "--kube-api-burst=100"}   # the operator's defaults, spelled out
assert set(ca["args"]) - extra == set(cb["args"]), (ca["args"], cb["args"])
for k in ("image", "ports", "livenessProbe", "readinessProbe", "securityContext", "resources"):
    assert ca[k] == cb[k], (k, ca[k], cb[k])
print("defaults == deploy/:", len(a), "objects")
P

echo "== 2. bad values are rejected, naming the value"
for f in "$V"/bad-*.yaml; do
  want=$(sed -n '1s/^# expect-error: //p' "$f")
  [ -n "$want" ] || fail "$f has no '# expect-error:' line"
  if "$HR" -f "$f" "$CHART" > /dev/null 2> "$TMPDIR/err"; then fail "$(basename "$f") rendered; want: $want"; fi
  grep -qF -- "$want" "$TMPDIR/err" || { cat "$TMPDIR/err"; fail "$(basename "$f"): error does not say: $want"; }
  echo "ok - $(basename "$f"): $(grep -F -- "$want" "$TMPDIR/err" | head -1)"
done
cp -r "$CHART" "$TMPDIR/noschema"; rm "$TMPDIR/noschema/values.schema.json"
if "$HR" -f "$V/bad-missing.yaml" "$TMPDIR/noschema" > /dev/null 2> "$TMPDIR/err"; then fail "no-schema chart rendered without workerImage"; fi
grep -q "workerImage is required" "$TMPDIR/err" || { cat "$TMPDIR/err"; fail "required did not name workerImage"; }
echo "ok - without the schema, the template's required names workerImage: $(tail -1 "$TMPDIR/err")"

echo "== 3. kubectl apply --dry-run=server, then for real"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP (parts 3-4): kubectl is not installed (the real kubectl is not in Debian bookworm)"; echo "helm render ok"; exit 0
fi
. "$root/tests/kubesim/testlib.sh"
podman_ok=1
( . "$root/scripts/podman-lib.sh"; rm_podman_why_not >/dev/null && for i in ringmaster/operator:latest ringmaster/worker:cpu; do
    "${RM_PODMAN[@]}" image exists "$i" || exit 1; done ) || podman_ok=0
"$HR" --include-crds -f "$V/ok-images.yaml" "$CHART" > "$TMPDIR/release.yaml"
if [ $podman_ok = 1 ]; then ks_start_podman_tls; else ks_start --no-kubelet; fi
printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: ringmaster-system}\n' | k apply -f - >/dev/null  # helm --create-namespace
# as `helm install` does: the CRDs first, then the objects (the training runtimes are of their kinds)
$PY - "$TMPDIR/release.yaml" "$TMPDIR/crds.yaml" "$TMPDIR/objects.yaml" <<'P'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
crd = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
yaml.safe_dump_all(crd, open(sys.argv[2], "w")); yaml.safe_dump_all([d for d in docs if d not in crd], open(sys.argv[3], "w"))
P
out=$(k apply --dry-run=server -f "$TMPDIR/crds.yaml" 2>&1) || fail "server dry run: $out"
echo "$out" | head -3
grep -q "(server dry run)" <<<"$out" || fail "not a server dry run"
k get crd trainingjobs.ringmaster.dev >/dev/null 2>&1 && fail "the dry run created the CRD"
k apply -f "$TMPDIR/crds.yaml" >/dev/null || fail "apply the rendered chart's CRDs"
for c in trainingjobs trainingruntimes clustertrainingruntimes; do
  k wait --for condition=established --timeout=20s "crd/$c.ringmaster.dev" >/dev/null
done
out=$(k apply --dry-run=server -f "$TMPDIR/objects.yaml" 2>&1) || fail "server dry run: $out"
k -n ringmaster-system get deployment ringmaster-operator >/dev/null 2>&1 && fail "the dry run created the Deployment"
k apply -f "$TMPDIR/objects.yaml" >/dev/null || fail "apply the rendered chart"
k -n ringmaster-system get deployment ringmaster-operator -o json > "$TMPDIR/dep.json" || fail "rendered Deployment not installed"
k get clusterrole ringmaster-operator >/dev/null || fail "rendered ClusterRole not installed"
k get clustertrainingruntime cpu gpu-nccl >/dev/null || fail "the rendered training runtimes are not installed"
echo "ok - the rendered chart is installed"

echo "== 4. the operator from the rendered Deployment runs a job"
if [ $podman_ok = 0 ]; then echo "SKIP (part 4): podman or the images are not available (make images)"; echo "helm render ok"; exit 0; fi
ks_operator_pod_from "$TMPDIR/dep.json" ringmaster/worker:cpu > "$TMPDIR/op.json"
k apply -f "$TMPDIR/op.json" >/dev/null
ready() { [ "$(k -n ringmaster-system get pod ringmaster-operator-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)" = True ]; }
for _ in $(seq 1 120); do ready && break; sleep 1; done
ready || fail "operator from the rendered chart not Ready: $(k -n ringmaster-system logs ringmaster-operator-0 2>&1 | tail -20)"
echo "ok - the operator pod from the rendered Deployment is Ready"
cat > "$TMPDIR/tj.yaml" <<'Y'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: helm-small}
spec:
  replicas: 2
  training: {epochs: 1, maxSteps: 60, model: {hidden: [64]}}
  checkpoint: {intervalSteps: 20}
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:cpu
        securityContext: {readOnlyRootFilesystem: true}
        volumeMounts: [{name: ckpt, mountPath: /checkpoints}, {name: tmp, mountPath: /tmp}]
      volumes: [{name: ckpt, emptyDir: {}}, {name: tmp, emptyDir: {}}]
Y
k apply -f "$TMPDIR/tj.yaml" >/dev/null || fail "apply job"
for _ in $(seq 1 300); do p=$(k get tj helm-small -o jsonpath='{.status.phase}' 2>/dev/null || true); [ "$p" = Succeeded ] || [ "$p" = Failed ] && break; sleep 1; done
k get tj helm-small
[ "$p" = Succeeded ] || fail "the job through the rendered chart ended $p: $(k get tj helm-small -o jsonpath='{.status}')"
echo "ok - a TrainingJob Succeeded through the operator installed from the rendered chart"
echo "helm render ok"
