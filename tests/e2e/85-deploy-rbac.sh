#!/usr/bin/env bash
# 85-deploy-rbac: `kubectl apply --dry-run=server -f deploy/` against kubesim succeeds and creates
# nothing; a real `kubectl apply -f deploy/` installs everything; the operator, run as a local process
# standing in for the Deployment's pod (same flags), then runs a TrainingJob through a worker failure,
# a 409, an operator crash and its TTL deletion. Every API request the operator made (kubesim's request log, by user agent)
# must be allowed by deploy/20-rbac.yaml, and every verb the RBAC grants must have been used:
# least privilege, checked both ways.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim

# A server dry run validates each object against the live server, so objects in a namespace that
# the same apply would create fail as they would on a real apiserver (kubernetes#83562): create the
# namespace first, as `helm install --create-namespace` does.
k apply -f "$RM_ROOT/deploy/00-namespace.yaml" >/dev/null || fail "namespace"
k apply --dry-run=server -f "$RM_ROOT/deploy/" > "$T/dry.txt" || fail "server dry-run of deploy/ failed"
cat "$T/dry.txt"
grep -q "server dry run" "$T/dry.txt" || fail "kubectl did not do a server dry run"
if k get crd trainingjobs.ringmaster.dev >/dev/null 2>&1; then fail "dry run created the CRD"; fi
if k -n ringmaster-system get deployment ringmaster-operator >/dev/null 2>&1; then fail "dry run created the Deployment"; fi

k apply -f "$RM_ROOT/deploy/" > "$T/apply.txt" || fail "kubectl apply -f deploy/ failed"
cat "$T/apply.txt"
k wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
for c in trainingruntimes clustertrainingruntimes; do
  k wait --for condition=established --timeout=20s "crd/$c.ringmaster.dev" >/dev/null || fail "deploy/ did not install crd/$c"
done
for o in namespace/ringmaster-system -n\ ringmaster-system\ serviceaccount/ringmaster-operator \
         clusterrole/ringmaster-operator clusterrolebinding/ringmaster-operator \
         -n\ ringmaster-system\ role/ringmaster-leader-election -n\ ringmaster-system\ rolebinding/ringmaster-leader-election \
         -n\ ringmaster-system\ deployment/ringmaster-operator -n\ ringmaster-system\ service/ringmaster-operator; do
  # shellcheck disable=SC2086
  k get $o >/dev/null || fail "deploy/ did not install $o"
done

# the Deployment's own args, with loopback addresses instead of the pod's
args=$(k -n ringmaster-system get deployment ringmaster-operator -o jsonpath='{.spec.template.spec.containers[0].args}')
echo "$args" | grep -q -- "--leader-elect" || fail "deployment lacks --leader-elect"
curl -fsS -X DELETE "$KS_URL/kubesim/requests" >/dev/null
start_operator a --leader-elect --leader-election-namespace ringmaster-system --log-format json
wait_for 30 "operator ready (leader)" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

# The job exercises the operator's rarer paths too, so unused grants really are unused:
# a worker failure (pod delete + create, Warning event), a 409 on a status write (GET from fresh
# state), an operator crash and restart (the existing Secret is read back) and
# ttlSecondsAfterFinished (the operator deletes the TrainingJob itself).
fast_job rbacjob 2 1 "        env: [{name: RINGMASTER_FAULT, value: 'exit:rank=1:step=60'}]" |
  sed 's/^  restartPolicy:/  runPolicy: {ttlSecondsAfterFinished: 2}\n  restartPolicy:/' | k apply -f - >/dev/null
wait_for 30 "2 pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=rbacjob --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
curl -fsS -X POST "$KS_URL/kubesim/faults" -d '{"failNext":1,"code":409,"verb":"update","resource":"trainingjobs"}' >/dev/null
kill -9 "$OP_PID_a"; wait "$OP_PID_a" 2>/dev/null || true
start_operator b --leader-elect --leader-election-namespace ringmaster-system --log-format json
wait_for 40 "restarted operator leads" curl -fsS "http://127.0.0.1:$OP_PROBE_b/readyz"
wait_for 150 "rbacjob finished and deleted by its TTL" bash -c "! kubectl get tj rbacjob >/dev/null 2>&1"
grep -qE '"reason":"(WorkerFailed|ProgressDeadlineExceeded)"' "$T"/operator-*.log ||
  fail "no Warning event for the injected worker failure in the operators' logs"
wait_for 30 "pods removed" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=rbacjob --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
# a one-trial TrainingSweep: the sweep controller creates its trial and writes the sweep's status
mkdir -p "$T/ckpt/default/rbacsweep-0"
fast_job rbacsweep 1 1 | $PY -c '
import sys, yaml
tj = yaml.safe_load(sys.stdin)
print(yaml.safe_dump({"apiVersion": "ringmaster.dev/v1alpha1", "kind": "TrainingSweep",
    "metadata": {"name": "rbacsweep"}, "spec": {"parameters": [{"path": "training.optimizer.lr",
    "values": [0.05]}], "trialTemplate": tj["spec"]}}))' | k apply -f - >/dev/null
wait_for 120 "rbacsweep Succeeded" bash -c "[ \"\$(kubectl get tsw rbacsweep -o jsonpath='{.status.phase}')\" = Succeeded ]"
# training runtimes: a job's first pass reads the runtime it names (get), of either kind; these two
# do not exist, so each job is Failed at once
for kind in ClusterTrainingRuntime TrainingRuntime; do
  printf 'apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: rbac-%s}\nspec: {runtimeRef: {kind: %s, name: absent}}\n' \
    "${kind,,}" "$kind" | k apply -f - >/dev/null || fail "apply the job on a $kind"
  wait_for 30 "rbac-${kind,,} Failed" bash -c "[ \"\$(kubectl get tj rbac-${kind,,} -o jsonpath='{.status.phase}')\" = Failed ]"
done
sleep 1

curl -fsS "$KS_URL/kubesim/requests" > "$T/requests.json"
$PY - "$RM_ROOT/deploy/20-rbac.yaml" "$T/requests.json" <<'PYEOF' || fail "RBAC does not match the operator's requests"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
reqs = [r for r in json.load(open(sys.argv[2]))["items"] if r.get("userAgent", "").startswith("ringmaster-operator")]
assert reqs, "no operator requests recorded"
grants = []   # (namespace or None, group, resource, verb)
for d in docs:
    if d["kind"] in ("ClusterRole", "Role"):
        ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
        for rule in d["rules"]:
            for g in rule["apiGroups"]:
                for res in rule["resources"]:
                    for v in rule["verbs"]:
                        grants.append((ns, g, res, v))
used, denied = set(), []
for r in reqs:
    if r["resource"] == "" and r["verb"] in ("get",):
        continue  # discovery (/api, /version, /apis/G/V) needs no RBAC rule
    res = r["resource"] + ("/" + r["subresource"] if r["subresource"] else "")
    ok = [g for g in grants if g[1] == r["group"] and g[2] == res and g[3] == r["verb"]
          and (g[0] is None or g[0] == r["namespace"])]
    if not ok:
        denied.append((r["method"], r["path"], r["verb"], r["group"], res, r["namespace"]))
    else:
        used.update(ok)
# Grants for paths an e2e run cannot provoke on purpose, each with the code path that needs it.
RARE = {("", "secrets", "get"): "runtime.c: Secret create answered AlreadyExists before the informer saw it",
        ("ringmaster.dev", "trainingjobs", "patch"): "sweepctl.c: a median-stopped trial is suspended (e2e 69 provokes it); Kueue: suspend/run a queued job (e2e 69-operator-kueue)"}
# Gang scheduling and Kueue grants are used (and checked both ways) by e2e 69-operator-gang and
# 69-operator-kueue, which run the operator with those integrations.
GANG_KUEUE = {"podgroups", "workloads", "workloads/status", "resourceflavors"}
unused = [g for g in grants if g not in used and (g[1], g[2], g[3]) not in RARE and g[2] not in GANG_KUEUE]
print(f"{len(reqs)} operator requests; {len(denied)} not allowed; {len(unused)} granted but unused")
for d in sorted(set(denied)): print("  NOT ALLOWED:", d)
for u in unused: print("  UNUSED GRANT:", u)
sys.exit(1 if denied or unused else 0)
PYEOF
log "PASS"
