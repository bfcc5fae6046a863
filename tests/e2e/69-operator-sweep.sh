#!/usr/bin/env bash
# 69-operator-sweep: the operator's TrainingSweep controller on kubesim, driven by the real kubectl.
# A 6-trial sweep (1-worker trials, 2 at a time) runs to Succeeded; trials are TrainingJobs
# <sweep>-<i> owned by the sweep and labelled ringmaster.dev/sweep-name; never more than 2 unfinished;
# `kubectl get tsw` shows the best trial; the operator killed mid-sweep and restarted adopts the
# existing trials (same uids, every index created exactly once); deleting the sweep removes every
# trial and pod (owner cascade). An invalid sweep gets phase Failed naming the bad path.
# e2e-timeout: 900
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
k wait --for condition=established --timeout=20s crd/trainingsweeps.ringmaster.dev >/dev/null
start_operator a --log-format json
mkdir -p "$T/ckpt/default"
for i in 0 1 2 3 4 5; do mkdir -p "$T/ckpt/default/opsweep-$i"; done
cat > "$T/sweep.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingSweep
metadata:
  name: opsweep
spec:
  parallelTrials: 2
  objective: {metric: testAccuracy}
  earlyStopping: {rule: median, startEpoch: 1, minTrials: 2}
  parameters:
  - {path: training.optimizer.lr, values: [0.05, 0.02, 0.0002]}
  - {path: training.model.hidden, values: [[64], [128]]}
  trialTemplate:
    replicas: 1
    backend: ring
    restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
    checkpoint: {path: $T/ckpt, intervalSteps: 500}
    training:
      model: {type: mlp, hidden: [64]}
      epochs: 4
      batchSizePerWorker: 64
      optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
      warmupEpochs: 0
YAML
k apply -f "$T/sweep.yaml" >/dev/null || fail "kubectl apply of the sweep"
trials() { k get tj -l ringmaster.dev/sweep-name=opsweep -o json; }
wait_for 60 "2 trials" bash -c "[ \$(kubectl get tj -l ringmaster.dev/sweep-name=opsweep --no-headers 2>/dev/null | grep -c .) -ge 2 ]"
trials | $PY -c '
import json,sys
items=json.load(sys.stdin)["items"]
for t in items:
    md=t["metadata"]; refs=md.get("ownerReferences") or []
    assert any(r["kind"]=="TrainingSweep" and r["name"]=="opsweep" and r.get("controller") for r in refs), md
    assert md["labels"]["ringmaster.dev/sweep-name"]=="opsweep", md
    assert md["name"]=="opsweep-"+md["labels"]["ringmaster.dev/trial-index"], md
' || fail "trial metadata"

# never more than parallelTrials unfinished; kill the operator once 2 trials exist
k get tj -l ringmaster.dev/sweep-name=opsweep -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}' > "$T/uids-before"
kill -9 "$OP_PID_a"; wait "$OP_PID_a" 2>/dev/null || true
log "operator a killed with trials: $(cat "$T/uids-before")"
start_operator b --log-format json
# while it runs: never more than parallelTrials (2) trials unfinished (not Succeeded/Failed, not stopped)
end=$(( $(date +%s) + 600 )); most=0
while [ "$(k get tsw opsweep -o jsonpath='{.status.phase}' 2>/dev/null)" != Succeeded ]; do
  [ "$(date +%s)" -ge "$end" ] && fail "timed out waiting for the sweep to succeed"
  # (a trial being stopped has spec.runPolicy.suspend set: it no longer counts)
  u=$(k get tj -l ringmaster.dev/sweep-name=opsweep -o jsonpath='{range .items[*]}{.status.phase}/{.spec.runPolicy.suspend}{"\n"}{end}' 2>/dev/null |
      grep -cvE '^(Succeeded|Failed|Suspended)/|/true$' || true)
  [ "$u" -gt "$most" ] && most=$u
  sleep 0.3
done
log "at most $most trials unfinished at once"
[ "$most" -le 2 ] || fail "$most trials unfinished at once (parallelTrials 2)"
k get tsw opsweep -o json > "$T/sweep.json"
$PY - "$T/sweep.json" <<'PY' || fail "sweep status: $(cat "$T/sweep.json")"
import json, sys
j = json.load(open(sys.argv[1])); st = j["status"]; t = st["trials"]
assert t["total"] == 6 and t["pending"] == 0 and t["running"] == 0, t
assert t["succeeded"] >= 1 and t["succeeded"] + t["failed"] + t["stopped"] == 6, t
ok = [r for r in st["trialStatuses"] if r["phase"] == "Succeeded"]
assert st["best"]["objective"] == max(r["objective"] for r in ok), st["best"]
conds = {c["type"]: c for c in st["conditions"]}
assert conds["Succeeded"]["status"] == "True" and conds["Succeeded"]["observedGeneration"] == j["metadata"]["generation"], conds
for r in st["trialStatuses"]:
    if r["phase"] == "Stopped":
        assert r["reason"] == "MedianStop", r
print("trials", t, "best", st["best"]["trial"], st["best"]["objective"])
PY
best=$(k get tsw opsweep -o jsonpath='{.status.best.trial}')
k get tsw > "$T/get.txt"; cat "$T/get.txt"
head -1 "$T/get.txt" | grep -qE 'NAME +PHASE +TRIALS +RUNNING +BEST +AGE' || fail "printer columns: $(head -1 "$T/get.txt")"
grep -qE "^opsweep +Succeeded +6 +0 +$best " "$T/get.txt" || fail "kubectl get tsw does not show the best trial $best"
# a stopped trial is Suspended (its workers gone), never Failed
for n in $(k get tj -l ringmaster.dev/sweep-name=opsweep -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
  ph=$(tj_field "$n" '{.status.phase}')
  [ "$ph" = Failed ] && fail "trial $n Failed"
done
# the restarted operator adopted the trials it found: same uids, every index created exactly once
for pair in $(cat "$T/uids-before"); do
  n=${pair%%=*}; u=${pair#*=}
  [ "$(tj_field "$n" '{.metadata.uid}')" = "$u" ] || fail "trial $n was re-created after the restart"
done
[ "$(k get tj -l ringmaster.dev/sweep-name=opsweep --no-headers | grep -c .)" = 6 ] || fail "not 6 trials"
created=$(cat "$T"/operator-*.log | grep -c '"trial created"' || true)
[ "$created" = 6 ] || fail "trials created $created times in all (want 6: no duplicate index)"
m=$(metric "$OP_METRICS_b" '^ringmaster_sweep_trials')
[ "$m" = 6 ] || fail "ringmaster_sweep_trials sums to $m"
curl -fsS "http://127.0.0.1:$OP_METRICS_b/metrics" | grep -q '^ringmaster_sweep_best_objective{namespace="default",name="opsweep"} 0\.[0-9]' ||
  fail "ringmaster_sweep_best_objective"

log "delete the sweep: trials and pods go with it"
k delete tsw opsweep >/dev/null
wait_for 60 "trials gone" bash -c "[ \$(kubectl get tj -l ringmaster.dev/sweep-name=opsweep --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
wait_for 60 "pods gone" bash -c "[ \$(kubectl get pods --no-headers 2>/dev/null | grep -c '^opsweep-') -eq 0 ]"

log "an invalid sweep is Failed, naming the path"
sed -e 's/name: opsweep/name: badsweep/' -e 's/path: training.optimizer.lr,/path: training.optimizer.lrr,/' "$T/sweep.yaml" |
  k apply -f - >/dev/null
wait_for 30 "badsweep Failed" bash -c "[ \"\$(kubectl get tsw badsweep -o jsonpath='{.status.phase}')\" = Failed ]"
k get tsw badsweep -o jsonpath='{.status.conditions[0].message}' | grep -q 'spec.parameters\[0\].path: training.optimizer.lrr is not a TrainingJob spec field' ||
  fail "invalid sweep message: $(k get tsw badsweep -o jsonpath='{.status.conditions}')"
[ "$(k get tj --no-headers 2>/dev/null | grep -c '^badsweep')" = 0 ] || fail "an invalid sweep created trials"
log "PASS"
