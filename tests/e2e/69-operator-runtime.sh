#!/usr/bin/env bash
# 69-operator-runtime: training runtimes on a cluster (docs/trainingjob-api.md#runtimes).
#  1. a TrainingJob naming a ClusterTrainingRuntime gets the runtime's fields where it is silent and
#     its own where it sets them, visible in its pods: the runtime's worker count, pod label, image,
#     env and model; the job's env (merged by name with the runtime's), learning rate and epochs;
#     status.runtime records {kind, name, generation};
#  2. the runtime edited (replicas 3, another model) and then deleted mid-run changes nothing: the
#     workers replaced after the edit get the spec their group runs, no third worker appears, and
#     status.runtime keeps generation 1; runtimeRef edited to another runtime is not applied
#     (InvalidSpec names spec.runtimeRef.name); the job Succeeds with the runtime's maxSteps;
#  3. a job naming a TrainingRuntime that does not exist is Failed with a condition naming the field:
#     spec.runtimeRef.name: TrainingRuntime "nope" not found;
#  4. (within 1) `kubectl ringmaster runtimes` lists both kinds (deploy/runtimes/ applied too), and
#     `kubectl ringmaster status` shows the merged spec (the runtime's workers and maxRestarts).
# The job hangs rank 0 at step 5 (RINGMASTER_FAULT, once per job) with no progress deadline, so
# "mid-run" does not depend on the machine's speed: the test replaces both workers itself.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
mkdir -p "$T/plug"; ln -s "$RM_BIN/ringmaster" "$T/plug/kubectl-ringmaster"; export PATH="$T/plug:$PATH"
start_kubesim
install_crd
for c in trainingruntimes clustertrainingruntimes; do
  k wait --for condition=established --timeout=20s "crd/$c.ringmaster.dev" >/dev/null
done
start_operator a
mkdir -p "$T/ckpt/default/rtjob"
k apply -f - >/dev/null <<Y || fail "apply runtime"
apiVersion: ringmaster.dev/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt-cpu}
spec:
  template:
    replicas: 2
    backend: ring
    restartPolicy: {maxRestarts: 4, backoffSeconds: 1, progressDeadlineSeconds: 60}
    checkpoint: {path: $T/ckpt, intervalSteps: 50}
    training:
      model: {type: mlp, hidden: [64]}
      batchSizePerWorker: 64
      optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
      maxSteps: 100
      warmupEpochs: 0
    template:
      metadata: {labels: {ringmaster.dev/runtime: rt-cpu}}
      spec:
        containers:
        - name: worker
          image: ringmaster/worker:latest
          env:
          - {name: FROM_RUNTIME, value: "1"}
          - {name: SHARED, value: runtime}
Y
k apply -f - >/dev/null <<Y || fail "apply jobs"
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: rtjob}
spec:
  runtimeRef: {name: rt-cpu}
  restartPolicy: {progressDeadlineSeconds: 0}
  runPolicy: {cleanPodPolicy: None}
  training:
    epochs: 1
    optimizer: {lr: 0.05}
  template:
    spec:
      containers:
      - name: worker
        env:
        - {name: SHARED, value: job}
        - {name: FROM_JOB, value: "1"}
        - {name: RINGMASTER_FAULT, value: "hang:rank=0:step=5"}
---
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: rtmissing}
spec:
  runtimeRef: {kind: TrainingRuntime, name: nope}
  training: {epochs: 1}
Y

log "1. the runtime's fields and the job's own in the pods"
wait_for 60 "rtjob's 2 pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=rtjob --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
env_of() { k get pod "$1" -o "jsonpath={.spec.containers[0].env[?(@.name==\"$2\")].value}" 2>/dev/null; }
p=rtjob-worker-1
[ "$(env_of $p FROM_RUNTIME)/$(env_of $p SHARED)/$(env_of $p FROM_JOB)" = "1/job/1" ] ||
  fail "env: FROM_RUNTIME=$(env_of $p FROM_RUNTIME) SHARED=$(env_of $p SHARED) FROM_JOB=$(env_of $p FROM_JOB)"
[ "$(k get pod $p -o jsonpath='{.metadata.labels.ringmaster\.dev/runtime}')" = rt-cpu ] || fail "the runtime's pod label"
[ "$(k get pod $p -o jsonpath='{.spec.containers[0].image}')" = ringmaster/worker:latest ] || fail "the runtime's image"
train0=$(env_of $p RINGMASTER_TRAINING)
$PY - "$train0" <<'P' || fail "RINGMASTER_TRAINING: $train0"
import json, sys
t = json.loads(sys.argv[1])
got = (t["model"]["hidden"], t["optimizer"]["lr"], t["epochs"], t["maxSteps"])
assert got == ([64], 0.05, 1, 100), got
print("ok - training:", got)
P
# kubectl ringmaster: both kinds listed (the shipped runtimes too), and the job's status names its runtime
k apply -f "$RM_ROOT/deploy/runtimes/" >/dev/null || fail "apply deploy/runtimes/"
printf 'apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: team-cpu}\nspec: {template: {replicas: 3}}\n' |
  k apply -f - >/dev/null || fail "apply a TrainingRuntime"
k ringmaster runtimes > "$T/rts.txt"; cat "$T/rts.txt"
for want in '^TrainingRuntime +team-cpu +default +- +3 ' '^ClusterTrainingRuntime +rt-cpu +- +ring +2 ' \
            '^ClusterTrainingRuntime +cpu ' '^ClusterTrainingRuntime +gpu-nccl +- +nccl +4 '; do
  grep -qE "$want" "$T/rts.txt" || fail "kubectl ringmaster runtimes lacks /$want/"
done
wait_for 20 "status.runtime" bash -c "[ \"\$(kubectl get tj rtjob -o jsonpath='{.status.runtime.kind}/{.status.runtime.name}/{.status.runtime.generation}')\" = ClusterTrainingRuntime/rt-cpu/1 ]"

k ringmaster status rtjob > "$T/st.txt"
grep -q 'workers     [0-9]/[0-9] ready (desired 2, min 2, max 2)   restarts [0-9]* of 4 ' "$T/st.txt" &&
  grep -q 'runtime     ClusterTrainingRuntime/rt-cpu (generation 1' "$T/st.txt" || fail "status: $(cat "$T/st.txt")"

log "3. a missing runtime fails the job naming the field"
wait_for 30 "rtmissing Failed" tj_phase_is rtmissing Failed
msg=$(tj_field rtmissing '{.status.conditions[?(@.type=="Failed")].message}')
[ "$msg" = 'spec.runtimeRef.name: TrainingRuntime "nope" not found' ] || fail "Failed condition: $msg"
pods=$(pod_count rtmissing); [ "$pods" = 0 ] || fail "rtmissing has $pods pods"

log "2. the runtime edited, then deleted, mid-run"
wait_for 30 "rtjob Running" tj_phase_is rtjob Running
k patch clustertrainingruntime rt-cpu --type merge -p '{"spec":{"template":{"replicas":3,"training":{"model":{"hidden":[16]}}}}}' >/dev/null
[ "$(k get clustertrainingruntime rt-cpu -o jsonpath='{.metadata.generation}')" = 2 ] || fail "runtime generation did not move"
uids=$(k get pods -l ringmaster.dev/job-name=rtjob -o jsonpath='{.items[*].metadata.uid}')
k delete clustertrainingruntime rt-cpu >/dev/null
# the reference itself edited (kubesim has no CEL to refuse it): the job keeps its recorded runtime
# and says so, instead of reading gpu-nccl (whose pods would ask for a GPU)
k patch tj rtjob --type merge -p '{"spec":{"runtimeRef":{"name":"gpu-nccl"}}}' >/dev/null
wait_for 20 "InvalidSpec naming spec.runtimeRef.name" bash -c "kubectl get tj rtjob -o jsonpath='{.status.conditions[?(@.type==\"InvalidSpec\")].message}' | grep -q 'spec.runtimeRef.name: cannot change'"
# both workers replaced (one of them is hung): every pod of the job is now built after the edit
k delete pod rtjob-worker-0 rtjob-worker-1 --grace-period=0 --force --wait=false >/dev/null 2>&1
for i in 0 1; do
  wait_for 60 "a new rtjob-worker-$i" bash -c "u=\$(kubectl get pod rtjob-worker-$i -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && ! grep -q \"\$u\" <<<'$uids'"
done
for i in 0 1; do
  [ "$(env_of rtjob-worker-$i RINGMASTER_TRAINING)" = "$train0" ] ||
    fail "replacement $i got another spec.training: $(env_of rtjob-worker-$i RINGMASTER_TRAINING)"
done
[ "$(k get pod rtjob-worker-0 -o jsonpath='{.spec.containers[0].resources.limits.nvidia\.com/gpu}')" = "" ] ||
  fail "the replacement got gpu-nccl's GPU"
wait_for 60 "rtjob Succeeded" tj_phase_is rtjob Succeeded
k get pod rtjob-worker-2 >/dev/null 2>&1 && fail "the edited runtime's replicas reached the job"
[ "$(tj_field rtjob '{.spec.replicas}')" = "" ] || fail "the API server wrote spec.replicas into the job"
[ "$(tj_field rtjob '{.status.runtime.generation}')" = 1 ] || fail "status.runtime.generation moved"
[ "$(tj_field rtjob '{.status.result.steps}')" = 100 ] || fail "steps $(tj_field rtjob '{.status.result.steps}'), want the runtime's maxSteps 100"
k get tj -o wide | head -3
log "PASS"
