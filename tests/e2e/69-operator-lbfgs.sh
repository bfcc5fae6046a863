#!/usr/bin/env bash
# e2e-timeout: 900
# 69-operator-lbfgs: Sandblaster L-BFGS through the operator on kubesim
# (docs/strategies.md#sandblaster-l-bfgs). kubesim's process kubelet serves no cluster DNS, so this
# shows that the L-BFGS workers and the coordinator (a thread of server 0) find the shards the way the
# parameter-server workers do (worker/ps/ps_registry.h): each server registers its pod IP with the
# rendezvous, clients read the list before every connection they open.
#  1. a bad spec (optimizer lbfgs with strategy allreduce, applied without client-side validation
#     since kubesim evaluates no CEL) is Failed with reason InvalidSpec naming the field; no pods;
#  2. an L-BFGS job (2 servers, 4 workers, 8 passes of 16 portions): server 0's metrics carry
#     passes, line-search trials, gradient norm, loss and portions per worker (every worker took
#     portions, and they add up to the passes done); mid-run server 1's process is SIGKILLed: the
#     operator replaces its pod (a new pod IP), the replacement restores its shard and its L-BFGS
#     vectors, the coordinator finds it at its new address through the rendezvous, resumes at the
#     last accepted point, and the job Succeeds with "lbfgs done passes=8", accepted line-search
#     steps and a falling loss.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
WMPORT=$(free_port)   # the pods' metrics port (every pod has its own IP; server 0's is scraped)
start_kubesim
install_crd
start_operator a --worker-metrics-port "$WMPORT"
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
ksdata=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)
podlogs() { cat "$ksdata"/logs/default_"$1"_*/*.log 2>/dev/null; }   # every incarnation of pod $1

# 1. lbfgs needs strategy parameterServer: the operator refuses the job, creates nothing
cat <<YAML | k apply --validate=false -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: lbbad}
spec:
  replicas: 4
  strategy: allreduce
  training:
    epochs: 8
    optimizer: {type: lbfgs, portions: 16}
  template: {spec: {containers: [{name: worker, image: ringmaster/worker:latest}]}}
YAML
wait_for 30 "lbbad Failed" tj_phase_is lbbad Failed
[ "$(tj_field lbbad '{.status.conditions[?(@.type=="Failed")].reason}')" = InvalidSpec ] ||
  fail "lbbad: reason is not InvalidSpec"
msg=$(tj_field lbbad '{.status.conditions[?(@.type=="Failed")].message}')
grep -q 'spec.training.optimizer.type' <<<"$msg" && grep -q 'parameterServer' <<<"$msg" ||
  fail "lbbad: the Failed condition does not name the field: $msg"
log "bad spec refused: $msg"

# 2. the job
mkdir -p "$T/ckpt/default/lbtrain"   # stands in for the shared volume
cat <<YAML | k apply -f - >/dev/null
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: lbtrain}
spec:
  replicas: 4
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 1, progressDeadlineSeconds: 120}
  checkpoint: {path: $T/ckpt, intervalSteps: 100}
  training:
    dataset: fashion-mnist
    model: {type: mlp, hidden: [128]}
    epochs: 8
    batchSizePerWorker: 250
    optimizer: {type: lbfgs, history: 10, portions: 16, lineSearch: armijo, lr: 1}
  template:
    spec:
      containers:
      - name: worker
        image: ringmaster/worker:latest
YAML
[ "$(pod_count lbbad)" -eq 0 ] || fail "pods created for the invalid job lbbad"
ps1_pid() {   # server 1's process, from kubesim's log (scanning /proc is too slow on a busy host)
  local pid
  pid=$(grep -o 'started container" pod=default/lbtrain-ps-1 container=worker pid=[0-9]*' "$T/kubesim.log" |
        tail -1 | sed 's/.*pid=//')
  [ -n "$pid" ] && tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" >"$T/ps1.env" &&
    grep -qx 'RINGMASTER_PS_INDEX=1' "$T/ps1.env" && echo "$pid"
}
J='job="default/lbtrain"'
PS0IP=""
scrape() {   # server 0's metrics into $T/m.txt (kept when it does not answer)
  [ -n "$PS0IP" ] || PS0IP=$(k get pod lbtrain-ps-0 -o jsonpath='{.status.podIP}' 2>/dev/null) || true
  [ -n "$PS0IP" ] && curl -fsS --max-time 2 "http://$PS0IP:$WMPORT/metrics" -o "$T/m.new" 2>/dev/null &&
    grep -q '^ringmaster_lbfgs_passes_total{' "$T/m.new" && mv "$T/m.new" "$T/m.txt"
}
passes_ge() { scrape && awk -v n="$1" '/^ringmaster_lbfgs_passes_total\{/ {f=1; exit !($2 >= n)} END {if (!f) exit 1}' "$T/m.txt"; }
# server 1's pod and process, found before the passes start (8 passes take seconds)
wait_for 120 "server 1's process" ps1_pid
pid=$(ps1_pid) || fail "server 1's process not found"
uid=$(k get pod lbtrain-ps-1 -o jsonpath='{.metadata.uid}')
wait_for 300 "the coordinator completed 2 passes (server 0's metrics)" passes_ge 2
for m in ringmaster_lbfgs_passes_total ringmaster_lbfgs_line_search_trials_total \
         ringmaster_lbfgs_gradient_norm ringmaster_lbfgs_loss ringmaster_lbfgs_portions_reissued_total; do
  grep -q "^$m{$J}" "$T/m.txt" || fail "metric $m missing"
done
podlogs lbtrain-ps-0 | grep -q 'parameter server 1 is at 127\.0\.' ||
  fail "the coordinator did not learn server 1's pod IP from the rendezvous"
addr1=$(podlogs lbtrain-ps-0 | sed -n 's/.*parameter server 1 is at \([0-9.:]*\).*/\1/p' | tail -1)
at=$(awk '/^ringmaster_lbfgs_passes_total\{/ {print $2}' "$T/m.txt")
awk -v a="$at" 'BEGIN {exit !(a < 8)}' || fail "the job ran its 8 passes before server 1 could be killed"
log "SIGKILL server 1 (pid $pid, at $addr1) after $at passes"
kill -9 "$pid"
wait_for 120 "server 1 replaced" bash -c "u=\$(kubectl get pod lbtrain-ps-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid ]"
# the last metrics before the servers stop (they go after the workers)
while ! tj_phase_is lbtrain Succeeded; do
  tj_phase_is lbtrain Failed && fail "the job Failed"
  [ $SECONDS -lt 800 ] || fail "timed out waiting for the job to Succeed"
  scrape || true; sleep 0.5
done
log "job Succeeded"
P0=$(podlogs lbtrain-ps-0)
P1=$(podlogs lbtrain-ps-1)
grep -q 'msg="lbfgs done" passes=8 ' <<<"$P0" || fail "the coordinator did not finish its 8 passes"
grep -q 'lbfgs vectors restored' <<<"$P1" || fail "the replacement did not restore its L-BFGS vectors"
grep -q 'lbfgs: server 1 was replaced' <<<"$P0" || fail "the coordinator did not notice the new shard"
grep -q 'msg="lbfgs resumed at the last accepted point"' <<<"$P0" || fail "the coordinator did not resume the last commit"
addr1b=$(sed -n 's/.*parameter server 1 is at \([0-9.:]*\).*/\1/p' <<<"$P0" | tail -1)
[ -n "$addr1b" ] && [ "$addr1b" != "$addr1" ] ||
  fail "the coordinator did not find server 1's replacement at a new address ($addr1 -> ${addr1b:-none})"
accepted=$(grep -c 'lbfgs step accepted' <<<"$P0" || true)
[ "$accepted" -ge 2 ] || fail "only $accepted accepted line-search steps"
# Armijo: every accepted point is below the one before (a resume goes back to the last of them)
acc_losses=$(sed -n 's/.*lbfgs step accepted.* loss=\([0-9.]*\) .*/\1/p' <<<"$P0" | tr '\n' ' ')
$PY -c "import sys; l=[float(x) for x in '$acc_losses'.split()]; sys.exit(0 if all(b < a for a, b in zip(l, l[1:])) else 1)" ||
  fail "the accepted points' losses do not fall: $acc_losses"
first=$(grep -m1 'msg="lbfgs pass done"' <<<"$P0" | sed -n 's/.* loss=\([0-9.]*\).*/\1/p')
last=$(sed -n 's/.*msg="lbfgs done" passes=[0-9]* loss=\([0-9.]*\).*/\1/p' <<<"$P0")
$PY -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)" || fail "loss $first -> $last did not fall by 20%"
# portions per worker, from server 0's metrics: every worker took some (on demand), and the first
# answers add up to the passes done (16 each; the open pass' so far; the scrape is not atomic)
$PY - "$T/m.txt" <<'PY' || fail "portions per worker in server 0's metrics: $(grep '^ringmaster_lbfgs_portions_total' "$T/m.txt" | tr '\n' ' ')"
import re, sys
per, passes = {}, None
for l in open(sys.argv[1]):
    m = re.match(r'ringmaster_lbfgs_portions_total\{.*worker="(\d+)".*\} (\S+)', l)
    if m: per[int(m.group(1))] = float(m.group(2))
    m = re.match(r'ringmaster_lbfgs_passes_total\{.*\} (\S+)', l)
    if m: passes = float(m.group(1))
print("  metrics: passes=%s portions_per_worker=%s" % (passes, per))
ok = sorted(per) == [0, 1, 2, 3] and min(per.values()) > 0 and passes >= 2 and \
     16 * passes <= sum(per.values()) <= 16 * (passes + 2)
sys.exit(0 if ok else 1)
PY
done_per=$(sed -n 's/.*msg="lbfgs done" .*portions_per_worker=\([0-9,]*\).*/\1/p' <<<"$P0")
$PY -c "import sys; c=[int(x) for x in '$done_per'.split(',')]; sys.exit(0 if len(c)==4 and min(c)>0 and sum(c)>=8*16 else 1)" ||
  fail "portions per worker at the end: $done_per"
[ "$(tj_field lbtrain '{.status.restarts}')" = 0 ] || fail "a server's death restarted the workers"
k delete tj lbtrain lbbad --wait=true --timeout=60s >/dev/null
grep 'msg="lbfgs pass done"' <<<"$P0" | sed -n 's/.*\(pass=[0-9]*\) id=[0-9]* \(loss=[0-9.]*\) \(seconds=[0-9.]*\).*/  \1 \2 \3/p'
log "PASS operator L-BFGS job (2 servers, 4 workers, 8 passes x 16 portions) Succeeded after server 1 was killed (found again at $addr1b): loss $first -> $last, $accepted accepted steps (losses $acc_losses), portions per worker $done_per"
