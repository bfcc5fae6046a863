#!/usr/bin/env bash
# kubesim driven by the real kubectl (/usr/bin/kubectl picks 1.32 from /version): CRD apply +
# wait established, TrainingJob apply/get (printer columns)/describe (events)/patch/scale/delete,
# get -w streaming, apply twice = merge patch, owner deletion removes pods, kubectl run + logs.
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_need kubectl "$KS_KUBECTL_WHY"
ks_start
# ringmaster's CRD declares no default: values (a training runtime provides them); this copy gains
# one, to check that kubesim writes it into the object (L2)
/usr/bin/python3 - "$(ks_crd_file)" "$KS_TMP/crd.yaml" <<'PY'
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["backend"]["default"] = "auto"
yaml.safe_dump(crd, open(sys.argv[2], "w"))
PY
CRD=$KS_TMP/crd.yaml

out=$(k version -o json 2>&1) ; assert_contains "$out" '"minor": "32"' "A2 /version minor 32 (dispatcher runs kubectl 1.32)"
k apply -f "$CRD" >/dev/null || fail "apply CRD"
k wait --for condition=established crd/trainingjobs.ringmaster.dev --timeout=20s >/dev/null || fail "wait established"
ok "L1 CRD applied and Established"
out=$(k api-resources --api-group=ringmaster.dev)
assert_contains "$out" "trainingjobs" "B2 discovery lists the CRD's resource"
assert_contains "$out" "tj" "B2 short name tj"

cat >"$KS_TMP/tj.yaml" <<'Y'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata:
  name: x
  labels: {team: a}
spec:
  replicas: 2
  training: {mode: train, epochs: 1}
  template:
    spec:
      containers: [{name: worker, image: ringmaster/worker:latest}]
Y
out=$(k apply -f "$KS_TMP/tj.yaml" 2>&1) || fail "apply tj: $out"
assert_contains "$out" "trainingjob.ringmaster.dev/x created" "C3 kubectl apply (validate=strict) creates the CR"
out=$(k get tj x -o jsonpath='{.spec.backend}')
assert_eq "$out" "auto" "L2 schema default applied (spec.backend=auto)"

out=$(k get tj)
for col in PHASE WORKERS RESTARTS STEP LOSS AGE; do assert_contains "$out" "$col" "L4 printer column $col"; done

# an event through the API (events.k8s.io/v1), listed by describe through core/v1 (P2)
uid=$(k get tj x -o jsonpath='{.metadata.uid}')
now=$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)
curl -sf -XPOST -H 'Content-Type: application/json' "$KS_URL/apis/events.k8s.io/v1/namespaces/default/events" -d "{
 \"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"x.1\"},\"eventTime\":\"$now\",
 \"reportingController\":\"ringmaster.dev/operator\",\"reportingInstance\":\"op-1\",\"action\":\"Create\",
 \"reason\":\"WorkersCreated\",\"type\":\"Normal\",\"note\":\"created 2 workers\",
 \"regarding\":{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"name\":\"x\",\"namespace\":\"default\",\"uid\":\"$uid\"}}" >/dev/null \
  || fail "create event"
out=$(k describe tj x)
assert_contains "$out" "WorkersCreated" "P2 describe lists the event (core/v1 view of an events.k8s.io event)"
assert_contains "$out" "created 2 workers" "P2 note -> message"

# status through the status subresource, shown in the printer columns
k patch tj x --subresource=status --type=merge -p '{"status":{"phase":"Running","workers":"2/2","restarts":0,"progress":{"step":42,"loss":0.25}}}' >/dev/null || fail "patch status"
out=$(k get tj x)
assert_contains "$out" "Running" "L4 PHASE cell"
assert_contains "$out" "2/2" "L4 WORKERS cell"
assert_contains "$out" "42" "L4 STEP cell"

gen1=$(k get tj x -o jsonpath='{.metadata.generation}')
k patch tj x --type=merge -p '{"spec":{"replicas":4}}' >/dev/null || fail "patch spec"
gen2=$(k get tj x -o jsonpath='{.metadata.generation}')
[ "$gen2" -eq $((gen1 + 1)) ] && ok "I2 spec patch bumps generation ($gen1 -> $gen2)" || fail "generation $gen1 -> $gen2"
out=$(k get tj x -o jsonpath='{.status.phase}')
assert_eq "$out" "Running" "I1 spec patch keeps status"

k scale tj/x --replicas=3 >/dev/null || fail "scale"
assert_eq "$(k get tj x -o jsonpath='{.spec.replicas}')" "3" "L5 kubectl scale writes spec.replicas through /scale"
curl -s "$KS_URL/kubesim/requests?resource=trainingjobs" | grep -q '"subresource":"scale"' && ok "L5 scale went through the scale subresource" || fail "no /scale request"
# the probe's `kubectl scale --replicas=20000`: refused by the CRD maximum, the job untouched
rc=0; err=$(k scale tj/x --replicas=20000 2>&1) || rc=$?
[ $rc -ne 0 ] && echo "$err" | grep -q 'spec.replicas in body should be less than or equal to 16384' ||
  fail "kubectl scale --replicas=20000: rc=$rc $err"
assert_eq "$(k get tj x -o jsonpath='{.spec.replicas}')" "3" "kubectl scale over the CRD maximum is refused (422), replicas kept"

# kubectl apply twice: the second is a three-way merge sent as merge-patch
curl -s -XDELETE "$KS_URL/kubesim/requests" >/dev/null
sed -i 's/replicas: 2/replicas: 5/' "$KS_TMP/tj.yaml"
out=$(k apply -f "$KS_TMP/tj.yaml" 2>&1) || fail "apply 2: $out"
assert_contains "$out" "configured" "H2 second apply reports configured"
assert_eq "$(k get tj x -o jsonpath='{.spec.replicas}')" "5" "H2 second apply updated spec.replicas"
log=$(curl -s "$KS_URL/kubesim/requests?resource=trainingjobs&verb=patch")
assert_contains "$log" 'application/merge-patch+json' "H2 second apply used a merge patch"
log=$(curl -s "$KS_URL/kubesim/requests")
assert_contains "$log" '"path":"/openapi/v3"' "C2 apply fetched OpenAPI v3"

# get -w streams the changes
k get tj -w >"$KS_TMP/watch.out" 2>&1 &
KS_BG_PIDS+=($!)
wpid=$!
sleep 1.5
k patch tj x --subresource=status --type=merge -p '{"status":{"phase":"Succeeded","progress":{"step":99}}}' >/dev/null
wait_for grep -q Succeeded "$KS_TMP/watch.out" || { cat "$KS_TMP/watch.out"; fail "get -w did not stream the change"; }
ok "F2/L4 kubectl get -w streams a MODIFIED row"

# delete returns (its GET/LIST/WATCH wait sequence works, J7)
start=$(date +%s)
k delete tj x --timeout=20s >/dev/null || fail "delete tj"
[ $(( $(date +%s) - start )) -lt 10 ] && ok "J7 kubectl delete returned" || fail "kubectl delete was slow"
k get tj x >/dev/null 2>&1 && fail "tj still there"
out=$(k get tj x 2>&1); assert_contains "$out" 'trainingjobs.ringmaster.dev "x" not found' "G2 NotFound message"
kill "$wpid" 2>/dev/null

# deleting an owner removes its pods (J4, background GC)
k apply -f "$KS_TMP/tj.yaml" >/dev/null
uid=$(k get tj x -o jsonpath='{.metadata.uid}')
for i in 0 1; do
cat <<Y | k apply -f - >/dev/null || fail "create owned pod"
apiVersion: v1
kind: Pod
metadata:
  name: x-worker-$i
  labels: {job: x}
  ownerReferences: [{apiVersion: ringmaster.dev/v1alpha1, kind: TrainingJob, name: x, uid: "$uid", controller: true, blockOwnerDeletion: true}]
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: w, image: busybox, command: [sleep, "300"]}]
Y
done
k wait --for=condition=Ready pod -l job=x --timeout=20s >/dev/null || fail "owned pods not Ready"
ok "M2 owned pods Running and Ready"
k delete tj x --timeout=20s >/dev/null || fail "delete owner"
wait_for sh -c "[ -z \"\$(timeout 10 kubectl get pods -l job=x -o name 2>/dev/null)\" ]" || fail "owned pods not removed"
ok "J4 deleting the owner removed its pods (processes killed, pods gone)"

# kubectl run + logs (command on PATH overrides the entrypoint)
k run p --image=busybox --restart=Never --command -- sh -c 'echo hello from kubesim' >/dev/null || fail "kubectl run"
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/p --timeout=20s >/dev/null || fail "pod p did not succeed"
out=$(k logs p)
assert_eq "$out" "hello from kubesim" "M / D4 kubectl logs shows the container's output"
out=$(k get pod p)
assert_contains "$out" "Completed" "L4 pod STATUS column"
for col in NAME READY STATUS RESTARTS AGE; do assert_contains "$out" "$col" "L4 pod column $col"; done
out=$(k describe pod p)
assert_contains "$out" "Scheduled" "describe pod lists the scheduler's Scheduled event"
assert_contains "$out" "Started container p" "describe pod lists the kubelet's Started event"
k delete pod p --timeout=20s >/dev/null || fail "delete pod p"
ok "kubesim + kubectl: all checks passed"
