#!/usr/bin/env bash
# e2e-timeout: 900
# 69-operator-topology (docs/strategies.md#topology): the pods the operator renders on kubesim with 2 nodes.
#  1. a GPU job (nvidia.com/gpu: 1 in the template, the template sets NCCL_DEBUG=INFO): every worker
#     pod gets NCCL_SOCKET_IFNAME=eth0, NCCL_ASYNC_ERROR_HANDLING=1, TORCH_NCCL_ASYNC_ERROR_HANDLING=1,
#     the template's NCCL_DEBUG (exactly once), NODE_NAME from spec.nodeName; workersPerNode 1 gives
#     each pod a required anti-affinity to the job's other node groups and no pod affinity.
#  2. a CPU job with spec.placement.workersPerNode 2 and spec.training.allreduce hierarchical:
#     node-group labels 0,0,1,1, pod affinity to its own group, anti-affinity to the other; none of
#     the NCCL defaults; kubesim binds the pods 2 + 2 (2 pod slots per node) and the job Succeeds;
#     every worker reports its own node through NODE_NAME (node-a, node-b) and runs the
#     hierarchical allreduce, 2 nodes x 2 ranks. kubesim's scheduler does not evaluate pod affinity,
#     so which workers pair up is kubesim's choice; the rendered terms are what this checks.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
# 2 pods per node: kubesim's first-fit scheduler (it does not evaluate pod affinity) then has to put
# the 4-worker job 2 + 2, so the job really spans 2 nodes
start_kubesim --node node-a:cpu=64,memory=64Gi,gpu=4,pods=2 --node node-b:cpu=64,memory=64Gi,gpu=4,pods=2
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpu}
spec:
  replicas: 2
  placement: {workersPerNode: 1}
  restartPolicy: {maxRestarts: 0}
  # no GPU here: the workers fail at once and the job Fails; cleanPodPolicy None keeps the pods
  runPolicy: {cleanPodPolicy: None}
  training: {mode: train, epochs: 1}
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
        env: [{name: NCCL_DEBUG, value: INFO}]
        resources: {limits: {nvidia.com/gpu: 1}}
YAML
wait_for 30 "2 gpu pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=gpu --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
for i in 0 1; do
  k get pod "gpu-worker-$i" -o json | $PY -c '
import json,sys
i=int(sys.argv[1]); p=json.load(sys.stdin); sp=p["spec"]; c=sp["containers"][0]
names=[e["name"] for e in c["env"]]
assert names.count("NCCL_DEBUG")==1, names
env={e["name"]:e for e in c["env"]}
for k,v in {"NCCL_SOCKET_IFNAME":"eth0","NCCL_ASYNC_ERROR_HANDLING":"1","TORCH_NCCL_ASYNC_ERROR_HANDLING":"1","NCCL_DEBUG":"INFO","RINGMASTER_BACKEND":"nccl"}.items():
    assert env[k].get("value")==v, (k, env[k])
assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]=="spec.nodeName", env["NODE_NAME"]
assert p["metadata"]["labels"]["ringmaster.dev/node-group"]==str(i)
aff=sp["affinity"]; assert "podAffinity" not in aff, aff
t=aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
assert t["topologyKey"]=="kubernetes.io/hostname"
me={(e["key"],e["operator"]):e.get("values") for e in t["labelSelector"]["matchExpressions"]}
assert me[("ringmaster.dev/job-name","In")]==["gpu"] and me[("ringmaster.dev/node-group","NotIn")]==[str(i)], me
' "$i" || fail "gpu-worker-$i pod shape: $(k get pod gpu-worker-$i -o json)"
done
log "GPU defaults and spread placement rendered"
k delete tj gpu --wait=true --timeout=60s >/dev/null
wait_for 60 "gpu pods gone" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=gpu --no-headers 2>/dev/null | grep -c .) -eq 0 ]"

mkdir -p "$T/ckpt/default/topo"
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: topo}
spec:
  replicas: 4
  backend: ring
  placement: {workersPerNode: 2}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 120}
  runPolicy: {cleanPodPolicy: None}   # keep the pods: their spec.nodeName is checked below
  checkpoint: {path: $T/ckpt, intervalSteps: 100}
  training:
    mode: train
    allreduce: hierarchical
    model: {type: mlp, hidden: [64]}
    epochs: 1
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
wait_for 30 "4 topo pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=topo --no-headers 2>/dev/null | grep -c .) -eq 4 ]"
for i in 0 1 2 3; do
  k get pod "topo-worker-$i" -o json | $PY -c '
import json,sys
i=int(sys.argv[1]); g=str(i//2); p=json.load(sys.stdin); sp=p["spec"]; env={e["name"]:e for e in sp["containers"][0]["env"]}
assert p["metadata"]["labels"]["ringmaster.dev/node-group"]==g
for k in ("NCCL_SOCKET_IFNAME","NCCL_DEBUG","NCCL_ASYNC_ERROR_HANDLING"): assert k not in env, k
a=sp["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
assert a["labelSelector"]["matchLabels"]=={"ringmaster.dev/job-name":"topo","ringmaster.dev/node-group":g}, a
assert a["topologyKey"]=="kubernetes.io/hostname"
t=sp["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
me={(e["key"],e["operator"]):e.get("values") for e in t["labelSelector"]["matchExpressions"]}
assert me[("ringmaster.dev/node-group","NotIn")]==[g], me
assert json.loads(env["RINGMASTER_TRAINING"]["value"])["allreduce"]=="hierarchical"
' "$i" || fail "topo-worker-$i pod shape: $(k get pod topo-worker-$i -o json)"
done
log "packed placement rendered; waiting for training"
wait_for 400 "topo Succeeded" tj_phase_is topo Succeeded
nodes=$(k get pods -l ringmaster.dev/job-name=topo -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | grep -c . || true)
log "kubesim placed the 4 workers on $nodes node(s): $(k get pods -l ringmaster.dev/job-name=topo -o jsonpath='{range .items[*]}{.metadata.name}={.spec.nodeName} {end}')"
# What each worker reported: its node (the NODE_NAME the kubelet resolves from spec.nodeName through
# the downward API) and the node count the rendezvous derived: 2 nodes x 2 ranks, so every worker
# must run hierarchically.
for i in 0 1 2 3; do
  k logs "topo-worker-$i" > "$T/w$i.txt" 2>/dev/null || true
  { grep -h 'msg="topology"' "$T/w$i.txt" || true; } | tail -1 > "$T/t$i.txt"
  [ -s "$T/t$i.txt" ] || fail "worker $i logged no topology line"
done
reported=$(cat "$T"/t*.txt | grep -o ' node=[^ ]*' | sort -u | grep -c . || true)
[ "$reported" = 2 ] || fail "the workers reported $reported node(s), not node-a and node-b: $(cat "$T"/t*.txt)"
for i in 0 1 2 3; do
  grep -q "nodes=$reported node=" "$T/t$i.txt" || fail "worker $i counts other nodes than the $reported reported: $(cat "$T/t$i.txt")"
  grep -q 'local_world_size=2 allreduce="hierarchical 2 nodes x 2 ranks' "$T/t$i.txt" || fail "2 nodes x 2 but not hierarchical: $(cat "$T/t$i.txt")"
done
log "workers reported $reported node(s): $(cat "$T"/t*.txt | grep -o ' node=[^ ]*' | tr '\n' ' ')"
log "PASS accuracy=$(tj_field topo '{.status.result.testAccuracy}') nodes=$nodes"
