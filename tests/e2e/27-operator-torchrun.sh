#!/usr/bin/env bash
# e2e-host: podman containers
# 27-operator-torchrun: a PyTorch elastic job through the operator (docs/torchrun.md). kubesim runs
# pods as podman containers (--runtime podman); the operator runs here against it. The job is the
# README's deploy/examples/torchrun-elastic.yaml (120 steps instead of 240): its template runs
# `torchrun` (Debian's python3-torch 1.13, tests/images/torch-elastic/elastic.py: DDP on Gloo that
# checkpoints every 10 steps and resumes at any group size) with 3 workers, minReplicas 2,
# maxReplicas 3:
#  - the operator gives the pods PET_NNODES=2:3, the c10d backend at the job's store pod
#    (<job>-c10d, torch's own TCPStore) with is_host=false, the job's uid as the rendezvous id;
#    the store pod is Ready before any worker pod is created;
#  - one worker container is killed with `podman kill` mid-run: the job stays Running (no group
#    restart), a Warning event WorkerLost names the pod and the 2 survivors torchrun re-forms with,
#    the pod is replaced, the survivors resume from the checkpoint, and the job Succeeds with
#    restarts 1; the store pod is removed with the job's end.
# e2e-timeout: 600
# Builds ringmaster/torch-elastic:latest with scripts/images.sh when missing (its package layer is
# torch-ddp's, cached by podman; the apt mirror is needed when it is not).
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_need kubectl "$KS_KUBECTL_WHY"
ks_need_podman
t_start=$(date +%s)
JOB=torchrun-elastic
"$RM_ROOT/scripts/images.sh" torch-elastic > "$KS_TMP/build.log" 2>&1 \
  || { tail -5 "$KS_TMP/build.log"; echo "SKIP: image ringmaster/torch-elastic:latest could not be built here (make images IMAGES=torch-elastic; the apt mirror is needed when the package layer is not cached)"; exit 0; }
echo "image ready after $(( $(date +%s) - t_start )) s"

ks_start --runtime podman
k apply -f "$RM_ROOT/deploy/crd/" >/dev/null
k wait --for condition=established --timeout=20s crd/trainingjobs.ringmaster.dev >/dev/null
rport=$("$RM_ROOT/tests/e2e/free-port.py")
"$RM_BIN/ringmaster" operator --kubeconfig "$KUBECONFIG" --metrics-bind-address 127.0.0.1:0 \
  --health-probe-bind-address 127.0.0.1:0 --rendezvous-bind-address "127.0.0.1:$rport" \
  --worker-metrics-port 0 > "$KS_TMP/operator.log" 2>&1 &
KS_BG_PIDS+=($!)
opfail() { echo "--- operator (tail) ---" >&2; tail -n 30 "$KS_TMP/operator.log" >&2; fail "$@"; }
tj() { k get tj "$JOB" -o jsonpath="$1" 2>/dev/null; }
wait_until() { # SECONDS CMD...
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt $end ] || return 1; sleep 0.5; done
}
PVC="$KS_TMP/data/pvc/default/$JOB-checkpoints"

# the README's example as it is, with a shorter run (120 steps; the loss comes after step 20)
/usr/bin/python3 - "$RM_ROOT/deploy/examples/torchrun-elastic.yaml" > "$KS_TMP/job.json" <<'P'
import json, sys, yaml
tj = yaml.safe_load(open(sys.argv[1]))
tj["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "ELASTIC_STEPS", "value": "120"})
json.dump(tj, sys.stdout)
P
t_job=$(date +%s)
k apply -f "$KS_TMP/job.json" >/dev/null || fail "apply $JOB"
wait_until 60 k get pod "$JOB-worker-0" || opfail "no worker pod: $(tj '{.status}')"
store_ready=$(k get pod "$JOB-c10d" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
assert_eq "$store_ready" True "the c10d store pod is Ready before the first worker pod exists"
env0=$(k get pod "$JOB-worker-0" -o json | /usr/bin/python3 -c '
import json, sys
env = {e["name"]: e.get("value") for e in json.load(sys.stdin)["spec"]["containers"][0]["env"]}
print(" ".join("%s=%s" % (k, env.get(k)) for k in ("PET_NNODES", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_CONF", "PET_MAX_RESTARTS", "PET_NPROC_PER_NODE")))
print("PET_RDZV_ID=%s" % env.get("PET_RDZV_ID"))')
echo "$env0"
assert_contains "$env0" "PET_NNODES=2:3 PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=$JOB-c10d.$JOB:29401 PET_RDZV_CONF=last_call_timeout=3,is_host=false PET_MAX_RESTARTS=3 PET_NPROC_PER_NODE=1" \
  "the elastic settings torchrun reads"
assert_eq "$(echo "$env0" | sed -n 's/^PET_RDZV_ID=//p')" "$(tj '{.metadata.uid}')" "the rendezvous id is the job's uid"

# ---- lose a worker mid-run --------------------------------------------------------------------
step() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$PVC/progress.json" 2>/dev/null || echo 0; }
past_20() { [ "$(step)" -ge 20 ]; }
wait_until 180 past_20 \
  || opfail "no checkpoint at step 20: $(tj '{.status}'); $(k logs "$JOB-worker-0" 2>&1 | tail -20)"
assert_eq "$(tj '{.status.phase}')" Running "the job is Running"
victim=$("${RM_PODMAN[@]}" ps --filter "label=io.kubesim.pod=default/$JOB-worker-1" --format '{{.Names}}' | head -1)
[ -n "$victim" ] || fail "no container for $JOB-worker-1"
t_kill=$(date +%s)
"${RM_PODMAN[@]}" kill "$victim" >/dev/null
ok "killed worker container $victim at step $(step) ($(( t_kill - t_job )) s into the job)"
ev() { # the job's events, one a line: TYPE REASON: MESSAGE
  k get events -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for e in json.load(sys.stdin)["items"]:
    o = e.get("involvedObject") or e.get("regarding") or {}
    if o.get("name") == sys.argv[1]:
        print("%s %s: %s" % (e.get("type"), e.get("reason"), e.get("message") or e.get("note") or ""))' "$JOB"
}
lost_seen() { ev | grep -q WorkerLost; }
wait_until 60 lost_seen || opfail "no WorkerLost event: $(ev)"
lost=$(ev | grep WorkerLost); echo "$lost"
assert_contains "$lost" "Warning WorkerLost" "a Warning event WorkerLost"
assert_contains "$lost" "worker 1 failed (exit code 137" "it names the lost worker and its exit"
assert_contains "$lost" "torchrun re-forms with the 2 surviving workers of 3 (minReplicas 2)" "and the group torchrun re-forms"
assert_contains "$lost" "replacing pod $JOB-worker-1" "and the pod it replaces"
assert_eq "$(tj '{.status.phase}')" Running "the job stayed Running (no group restart)"
# (the Running condition's reason is WorkerLost only until the replacement runs: kubesim starts it
# within a second, so the Normal event WorkerReplaced is what the test reads, below)

ended() { case "$(tj '{.status.phase}')" in Succeeded | Failed) return 0 ;; esac; return 1; }
wait_until 240 ended \
  || opfail "$JOB did not finish: $(tj '{.status}'); $(k logs "$JOB-worker-0" 2>&1 | tail -20)"
t_done=$(date +%s)
k get tj "$JOB"
log0=$(k logs "$JOB-worker-0" 2>&1); echo "$log0" | grep -E "resumed|finished" | head
assert_eq "$(tj '{.status.phase}')" Succeeded "the elastic job Succeeded"
assert_eq "$(tj '{.status.restarts}')" 1 "one replacement counted against maxRestarts"
[ -z "$(tj '{.status.conditions[?(@.type=="Restarting")].status}')" ] && ok "never Restarting: the survivors went on" \
  || fail "a Restarting condition: $(tj '{.status.conditions}')"
echo "$log0" | grep -Eq "rank [0-9]+/[23] restart [1-9] resumed at step [1-9][0-9]*" \
  && ok "the survivors resumed from the checkpoint: $(echo "$log0" | grep -Eo 'rank [0-9]+/[23] restart [1-9] resumed at step [0-9]+' | head -1)" \
  || fail "no resume from a checkpoint in worker 0's log"
assert_contains "$log0" "finished 120 steps" "training ran to the end"
replaced=$(ev | grep WorkerReplaced); echo "$replaced"
assert_contains "$replaced" "Normal WorkerReplaced: TrainingJob default/$JOB: every worker runs again (3)" \
  "a Normal event WorkerReplaced once the replacement runs"
assert_eq "$(tj '{.status.conditions[?(@.type=="Running")].reason}')" Succeeded "the Running condition ends with the job"
store_gone() { ! k get pod "$JOB-c10d"; }
wait_until 30 store_gone && ok "the c10d store pod is removed with the job's end" \
  || fail "the store pod outlived the job"
echo "torchrun elastic job: $(( t_done - t_job )) s (lost a pod $(( t_kill - t_job )) s in, done $(( t_done - t_kill )) s later)"
echo "27-operator-torchrun total: $(( $(date +%s) - t_start )) s"
