#!/usr/bin/env bash
# 69-operator-gang: the deadlock of kubeflow/trainer#165 and its cure, on kubesim with the real
# kubectl. Two nodes with room for 4 one-CPU workers; two 4-worker jobs applied at once.
#  - --gang-scheduler none: kubesim's default scheduler binds pods one at a time, so both jobs
#    get part of their workers (shown: some pods bound, the rest PodScheduled=False Unschedulable)
#    and neither finishes within the deadline;
#  - volcano and coscheduling (PodGroup CRDs from the real projects' schemas, fixtures/crds/):
#    both jobs Succeed one after the other (never more than 4 workers bound, never both jobs at
#    once), their PodGroups carry minMember/minResources/owner, and no PodGroup is left;
#    with Volcano each job's pods are created only after its PodGroup left Pending (ordered by the
#    global resourceVersion of two watches);
#  - --gang-scheduler volcano without the PodGroup CRD exits at once naming the resource.
# e2e-timeout: 900
source "$(dirname "$0")/6x-operator-lib.bash"
FIX="$RM_ROOT/tests/e2e/fixtures/crds"
NODES=(--node gang-n1:cpu=2,memory=8Gi,pods=20 --node gang-n2:cpu=2,memory=8Gi,pods=20)

gang_job() {  # gang_job NAME
  mkdir -p "$T/ckpt/default/$1"
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata:
  name: $1
spec:
  replicas: 4
  backend: ring
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 0}
  runPolicy:
    schedulingPolicy: {queue: default, scheduleTimeoutSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 50}
  training:
    mode: train
    model: {type: mlp, hidden: [32]}
    epochs: 1
    maxSteps: 40
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
        resources:
          requests: {cpu: "1", memory: 256Mi}
YAML
}

stop_all() {  # kill the previous case's kubesim and operator (by pid)
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}

new_cluster() {  # new_cluster CASE [kubesim args]: fresh kubesim + discovery cache
  local c=$1; shift
  stop_all
  export KUBECACHEDIR="$T/kcache-$c"
  mv "$T/kubesim.log" "$T/kubesim-prev.log" 2>/dev/null || true
  start_kubesim "$@"
  install_crd
}

# bound_active: "A B", the pods of gang-a and of gang-b with a node and not finished (Succeeded or
# Failed pods hold no resources: kube-scheduler's cache leaves them out, and so does kubesim's),
# both counted from ONE list, so from one resourceVersion of the store. Two lists, one per job,
# are two instants: a gang-a list taken while it ran and a gang-b list taken 0.1 s after its
# pods finished (when gang-b was rightly bound) added up to "8 bound at once" in a CI run.
bound_active() {
  k get pods -l ringmaster.dev/job-name -o json 2>/dev/null | $PY -c '
import json,sys
n={"gang-a":0,"gang-b":0}
for p in json.load(sys.stdin)["items"]:
    j=p["metadata"].get("labels",{}).get("ringmaster.dev/job-name")
    if j in n and p["spec"].get("nodeName") and p.get("status",{}).get("phase") not in ("Succeeded","Failed"):
        n[j]+=1
print(n["gang-a"], n["gang-b"])'
}

# ---- 1. no gang scheduler: deadlock ----
RDZV_PORT=$(free_port)
new_cluster none "${NODES[@]}"
[ "$(k get nodes --no-headers | grep -c .)" = 2 ] || fail "two nodes expected"
[ "$(k get node gang-n1 -o jsonpath='{.status.allocatable.cpu}')" = 2 ] || fail "node allocatable"
start_operator none --gang-scheduler none
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_none/readyz"
# line the pods up before anything binds, as concurrent controllers do on a busy cluster
curl -fsS -X POST -d '{"schedulerHold":true}' "$KS_URL/kubesim/faults" >/dev/null
{ gang_job gang-a; echo ---; gang_job gang-b; } | k apply -f - >/dev/null
wait_for 60 "8 pods created" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name --no-headers 2>/dev/null | grep -c .) -eq 8 ]"
curl -fsS -X POST -d '{"schedulerHold":false}' "$KS_URL/kubesim/faults" >/dev/null
wait_for 30 "4 pods bound" bash -c "[ \$(kubectl get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c gang-n) -eq 4 ]"
ab=$(bound_active) || fail "listing the pods"; read -r a b <<<"$ab"
log "none: bound workers gang-a=$a gang-b=$b (room for 4)"
[ "$a" -ge 1 ] && [ "$a" -le 3 ] && [ "$b" -ge 1 ] && [ "$b" -le 3 ] || fail "expected both jobs partially scheduled, got a=$a b=$b"
# the rest are Unschedulable, saying why
unsched=$(k get pods -o json | $PY -c '
import json,sys
n=0
for p in json.load(sys.stdin)["items"]:
    for c in p.get("status",{}).get("conditions",[]):
        if c["type"]=="PodScheduled" and c["status"]=="False" and c.get("reason")=="Unschedulable" and "nodes are available" in c.get("message",""):
            n+=1
print(n)')
[ "$unsched" = 4 ] || fail "expected 4 Unschedulable pods, got $unsched"
k get pods -o wide >"$T/none-pods.txt"
sleep 20   # the deadline, twice what a job takes with a gang scheduler (cases 2, 3): neither can finish
for j in gang-a gang-b; do
  ph=$(tj_field $j '{.status.phase}')
  [ "$ph" != Succeeded ] || fail "$j Succeeded without a gang scheduler: no deadlock shown"
done
log "none: after 20 s neither job finished (phases $(tj_field gang-a '{.status.phase}')/$(tj_field gang-b '{.status.phase}'))"

# ---- 2./3. volcano and coscheduling: both Succeed, one after the other ----
for mode in volcano coscheduling; do
  RDZV_PORT=$(free_port)
  new_cluster "$mode" "${NODES[@]}"
  if [ $mode = volcano ]; then crd=scheduling.volcano.sh_podgroups.yaml; res=podgroups.scheduling.volcano.sh
  else crd=scheduling.x-k8s.io_podgroups.yaml; res=podgroups.scheduling.x-k8s.io; fi
  k create -f "$FIX/$crd" >/dev/null
  k wait --for condition=established --timeout=20s "crd/$res" >/dev/null
  start_operator "$mode" --gang-scheduler "$mode"
  wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$(eval echo \$OP_PROBE_$mode)/readyz"
  # every pod version, as a watch sees it (the jobs take a few seconds: polling can miss a pod)
  k get pods -w -o json >"$T/watch-$mode.json" 2>/dev/null &
  WPID=$!; PIDS+=("$WPID")
  # the same with the event types (a DELETED pod stops counting): replayed for "never both gangs"
  k get pods -w --output-watch-events -o json >"$T/watch-ev-$mode.json" 2>/dev/null &
  WEVPID=$!; PIDS+=("$WEVPID")
  k get "$res" -w -o json >"$T/watch-pg-$mode.json" 2>/dev/null &
  WPGPID=$!; PIDS+=("$WPGPID")
  sleep 1
  { gang_job gang-a; echo ---; gang_job gang-b; } | k apply -f - >/dev/null
  # from the watch: a job of a few seconds may be done (and its PodGroup gone) before a get
  pg_seen() { $PY - "$T/watch-pg-$mode.json" "$@" <<'PY'
import json,sys
text=open(sys.argv[1]).read(); dec=json.JSONDecoder(); i=0; first={}
while True:
    while i < len(text) and text[i].isspace(): i+=1
    if i >= len(text): break
    try: o,i=dec.raw_decode(text,i)
    except ValueError: break          # a version still being written
    first.setdefault(o["metadata"]["name"],o)
if sys.argv[2]=="names": sys.exit(0 if {"gang-a","gang-b"} <= set(first) else 1)
print(json.dumps(first[sys.argv[2]]))
PY
  }
  wait_for 30 "two PodGroups" pg_seen names
  pg_seen gang-a | MODE=$mode $PY -c '
import json,os,sys
pg=json.load(sys.stdin); sp=pg["spec"]; md=pg["metadata"]
o=md["ownerReferences"][0]
assert o["kind"]=="TrainingJob" and o["name"]=="gang-a" and o["controller"], o
assert sp["minMember"]==4, sp
assert sp["minResources"]["cpu"]=="4" and sp["minResources"]["memory"]=="1Gi", sp
if os.environ["MODE"]=="volcano":
    assert sp["queue"]=="default" and sp["minTaskMember"]=={"worker":4}, sp
else:
    assert sp["scheduleTimeoutSeconds"]==60 and "queue" not in sp, sp
' || fail "$mode PodGroup spec"
  # sample until both finish: never more than 4 workers bound, never both jobs at once
  end=$(( $(date +%s) + 300 )); overlap=0; maxb=0; order=""; phases=""; blocked=""
  while :; do
    ab=$(bound_active) || fail "$mode: listing the pods"; read -r a b <<<"$ab"
    [ $((a + b)) -gt $maxb ] && maxb=$((a + b))
    [ "$a" -gt 0 ] && [ "$b" -gt 0 ] && overlap=1
    for j in gang-a gang-b; do
      tj_phase_is $j Succeeded && [[ "$order" != *"$j"* ]] && order="$order $j"
    done
    [ "$(echo $order | wc -w)" = 2 ] && break
    [ "$(date +%s)" -ge "$end" ] && fail "$mode: both jobs did not Succeed within 300 s (done:$order)"
    phb=$(k get "$res" gang-b -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [ -n "$phb" ] && [[ " $phases " != *" $phb "* ]] && phases="$phases $phb"
    for j in gang-a gang-b; do   # why the waiting gang waits (rule R12): its condition Blocked
      br=$(tj_field $j '{.status.conditions[?(@.type=="Blocked")].reason}')
      [ -n "$br" ] && [[ " $blocked " != *" $br "* ]] && blocked="$blocked $br"
    done
    if [ $mode = volcano ]; then
      # Volcano: no pod of a job exists while its PodGroup is Pending
      for j in gang-a gang-b; do
        ph=$(k get "$res" $j -o jsonpath='{.status.phase}' 2>/dev/null || true)
        if [ "$ph" = Pending ] && [ "$(pod_count $j)" != 0 ]; then fail "$j has pods while its PodGroup is Pending"; fi
      done
    fi
    sleep 0.5
  done
  log "$mode: both Succeeded in order:$order; at most $maxb workers bound at once (sampled); Blocked reasons seen:$blocked"
  if [ $mode = volcano ]; then # no pods while the PodGroup waits: the condition holds for seconds
    [[ "$blocked" == *PodGroupPending* ]] ||
      fail "$mode: the waiting gang never said why in its Blocked condition (seen:$blocked)"
  elif [ $mode = coscheduling ]; then # its pods wait Unschedulable, maybe between two samples: the event stays
    ev=$(k get events --field-selector involvedObject.kind=TrainingJob,reason=Unschedulable --no-headers 2>/dev/null | grep -c . || true)
    [ "$ev" -ge 1 ] || fail "$mode: no Unschedulable event for the waiting gang (conditions seen:$blocked)"
  fi
  [ $overlap = 0 ] || fail "$mode: both jobs had workers bound at the same time"
  # the same without sampling: replay every pod version the watch saw, in resourceVersion order.
  # Bound = a node and not Succeeded/Failed, until DELETED (a terminating pod still holds its
  # node, as in kube-scheduler). Each gang's 4 must be seen bound together, never both gangs.
  $PY - "$T/watch-ev-$mode.json" <<'PY' || fail "$mode: the pod watch saw both jobs' workers bound at once, or not each gang whole"
import json,sys
t=open(sys.argv[1]).read(); d=json.JSONDecoder(); i=0
live={}; n=0; maxb=0; both=None
while True:
    while i < len(t) and t[i].isspace(): i+=1
    if i >= len(t): break
    try: e,i=d.raw_decode(t,i)
    except ValueError: break          # a version still being written
    o=e.get("object") or {}
    if e.get("type") not in ("ADDED","MODIFIED","DELETED") or o.get("kind") not in (None,"Pod"): continue
    md=o["metadata"]; job=md.get("labels",{}).get("ringmaster.dev/job-name")
    if job not in ("gang-a","gang-b"): continue
    n+=1
    if e["type"]=="DELETED": live.pop(md["name"],None)
    else: live[md["name"]]=(job, bool(o["spec"].get("nodeName")) and o.get("status",{}).get("phase") not in ("Succeeded","Failed"))
    c={"gang-a":0,"gang-b":0}
    for j,b in live.values(): c[j]+=b
    maxb=max(maxb,c["gang-a"]+c["gang-b"])
    if c["gang-a"] and c["gang-b"] and both is None: both=(md["name"], md["resourceVersion"], c)
print(f"pod watch: {n} versions of the jobs' pods; at most {maxb} workers bound at once")
assert both is None, ("both gangs bound after this version", both)
assert maxb==4, ("a gang of 4 was never seen bound whole", maxb)
PY
  # one after the other, from kubesim's own record (the jobs take seconds; sampling can miss):
  # every pod of the second gang was bound after every worker of the first had exited, and the
  # second PodGroup waited (volcano: Pending, then Inqueue; coscheduling: Scheduling) first
  MODE=$mode $PY - "$T/kubesim.log" <<'PY' || fail "$mode: the gangs were not scheduled one after the other"
import os,re,sys
lines=open(sys.argv[1]).read().splitlines()
bind={}; exit_={}; phases={"gang-a":[], "gang-b":[]}
for i,l in enumerate(lines):
    m=re.search(r'scheduler bound" pod=default/(gang-[ab])-worker-\d', l)
    if m: bind.setdefault(m.group(1),[]).append(i)
    m=re.search(r'container exited" pod=default/(gang-[ab])-worker-\d', l)
    if m: exit_.setdefault(m.group(1),[]).append(i)
    m=re.search(r'podgroup=default/(gang-[ab]) phase \S+ -> (\S+)', l)
    if m: phases[m.group(1)].append(m.group(2))
first,second=sorted(["gang-a","gang-b"], key=lambda j: min(bind[j]))
assert len(bind[first])==4 and len(bind[second])==4, bind
assert min(bind[second]) > max(exit_[first]), (first, second, "second bound before the first finished")
want=["Pending","Inqueue","Running"] if os.environ["MODE"]=="volcano" else ["Scheduling","Running"]
it=iter(phases[second])
assert all(w in it for w in want), (second, phases[second])
print(f"{first} ran, then {second}; {second}'s PodGroup: {' -> '.join(phases[second])}")
PY
  [ $maxb -le 4 ] || fail "$mode: more than 4 workers bound"
  # the pods were gang-scheduled
  kill "$WPID" "$WPGPID" "$WEVPID" 2>/dev/null || true
  if [ $mode = volcano ]; then
    # Volcano: each job's pods were created only after its PodGroup left Pending. resourceVersion
    # is one counter for all kinds, so the two watches can be ordered by it.
    $PY - "$T/watch-$mode.json" "$T/watch-pg-$mode.json" <<'PY' || fail "volcano: pods were created while their PodGroup was Pending"
import json,sys
def objs(f):
    t=open(f).read(); d=json.JSONDecoder(); i=0
    while True:
        while i < len(t) and t[i].isspace(): i+=1
        if i >= len(t): return
        o,i=d.raw_decode(t,i); yield o
rv=lambda o: int(o["metadata"]["resourceVersion"])
for job in ("gang-a","gang-b"):
    left=min((rv(o) for o in objs(sys.argv[2]) if o["metadata"]["name"]==job and o.get("status",{}).get("phase") not in (None,"","Pending")), default=None)
    created=min((rv(o) for o in objs(sys.argv[1]) if o["metadata"].get("labels",{}).get("ringmaster.dev/job-name")==job), default=None)
    assert left is not None and created is not None, (job, left, created)
    assert created > left, (job, "first pod at rv", created, "PodGroup left Pending at rv", left)
    print(f"{job}: PodGroup left Pending at rv {left}, first pod at rv {created}")
PY
  fi
  $PY -c '
import json,sys
t=open(sys.argv[1]).read(); d=json.JSONDecoder(); i=0; last=None
while True:
    while i < len(t) and t[i].isspace(): i+=1
    if i >= len(t): break
    o,i=d.raw_decode(t,i)
    if o.get("metadata",{}).get("name")=="gang-a-worker-0": last=o
assert last, "the watch never saw gang-a-worker-0"
json.dump(last, open(sys.argv[2],"w"))' "$T/watch-$mode.json" "$T/pod-$mode.json" || fail "$mode: never saw gang-a-worker-0"
  MODE=$mode $PY -c '
import json,os,sys
p=json.load(sys.stdin); md=p["metadata"]
if os.environ["MODE"]=="volcano":
    assert p["spec"]["schedulerName"]=="volcano", p["spec"].get("schedulerName")
    assert md["annotations"]["scheduling.k8s.io/group-name"]=="gang-a" and md["annotations"]["volcano.sh/task-spec"]=="worker", md
else:
    assert p["spec"]["schedulerName"]=="scheduler-plugins-scheduler"
    assert md["labels"]["scheduling.x-k8s.io/pod-group"]=="gang-a", md
' <"$T/pod-$mode.json" || fail "$mode pod decoration"
  wait_for 20 "no PodGroup left" bash -c "[ -z \"\$(kubectl get $res --no-headers 2>/dev/null)\" ]"
  # RBAC: exactly the PodGroup verbs deploy/20-rbac.yaml grants (patch: only when a spec changes)
  if [ $mode = volcano ]; then other=scheduling.x-k8s.io; mine=scheduling.volcano.sh; else other=scheduling.volcano.sh; mine=scheduling.x-k8s.io; fi
  curl -fsS "$KS_URL/kubesim/requests" >"$T/requests-$mode.json"
  $PY "$RM_ROOT/tests/e2e/fixtures/rbac_check.py" "$RM_ROOT/deploy/20-rbac.yaml" "$T/requests-$mode.json" podgroups \
    "$mine:podgroups:patch" "$other:podgroups:get" "$other:podgroups:create" "$other:podgroups:patch" "$other:podgroups:delete" ||
    fail "$mode: the operator's PodGroup requests do not match deploy/20-rbac.yaml"
  grep -q 'PodGroupDeleted' <(k get events -o json) || fail "$mode: no PodGroupDeleted event"
done

# ---- 4. --gang-scheduler volcano without the PodGroup CRD: exits at once naming it ----
new_cluster nocrd "${NODES[@]}"
t0=$(date +%s)
set +e
timeout 20 "$RM_BIN/ringmaster" operator --kubeconfig "$KUBECONFIG" --metrics-bind-address 0 \
  --health-probe-bind-address 0 --rendezvous-bind-address "127.0.0.1:$(free_port)" \
  --gang-scheduler volcano >"$T/nocrd.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "operator without the PodGroup CRD: rc=$rc (want a non-zero exit, not a hang)"
[ $(( $(date +%s) - t0 )) -le 10 ] || fail "operator took too long to fail"
grep -q 'podgroups.scheduling.volcano.sh/v1beta1' "$T/nocrd.log" || { cat "$T/nocrd.log"; fail "error does not name the missing resource"; }
log "no CRD: $(grep -o 'does not serve [^ ]*' "$T/nocrd.log" | head -1) (exit $rc)"
echo "PASS 69-operator-gang"
