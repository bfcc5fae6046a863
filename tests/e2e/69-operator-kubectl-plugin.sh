#!/usr/bin/env bash
# `kubectl ringmaster` (operator/kubectl.h): the ringmaster binary on PATH as kubectl-ringmaster is
# found by the real kubectl (`kubectl plugin list`) and run through it against kubesim and the
# operator: status (phase, workers, progress, conditions, events), logs of every worker merged by
# time with [worker-I] prefixes, --rank and --role filters, logs -f that follows a deleted worker to
# its replacement and ends with the job, restart (the group re-forms from the checkpoint), suspend and
# resume, runtimes without their CRDs, bash completion (also as kubectl_complete-ringmaster), and
# errors that name the flag or the job.
source "$(dirname "$0")/6x-operator-lib.bash"
# (pipes into grep read everything, never `grep -q`/`head`: under pipefail a writer cut off by an
#  early exit fails the pipeline — the Progress column check failed so in CI)
RDZV_PORT=$(free_port)
mkdir -p "$T/plug"
ln -s "$RM_BIN/ringmaster" "$T/plug/kubectl-ringmaster"
ln -s "$RM_BIN/ringmaster" "$T/plug/kubectl_complete-ringmaster"
export PATH="$T/plug:$PATH"
kubectl plugin list 2>/dev/null | grep "$T/plug/kubectl-ringmaster" >/dev/null || fail "kubectl does not find the plugin"
k ringmaster --help | grep 'logs JOB \[-f\]' >/dev/null || fail "help through kubectl"
k ringmaster logs --help | grep -- '--rank R' >/dev/null || fail "logs --help"
set +e; out=$(k ringmaster logs 2>&1); rc=$?; set -e
[ $rc -eq 2 ] && grep -q 'logs: a TrainingJob name is required' <<<"$out" || fail "logs without a job: $rc $out"
set +e; out=$(k ringmaster logs j --rank x 2>&1); rc=$?; set -e
[ $rc -eq 2 ] && grep -q -- '--rank: must be an integer >= 0 (got "x")' <<<"$out" || fail "bad --rank: $rc $out"

start_kubesim
k ringmaster runtimes | grep 'TrainingRuntime: not installed' >/dev/null || fail "runtimes without the CRD"
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

set +e; out=$(k ringmaster status nope 2>&1); rc=$?; set -e
[ $rc -eq 1 ] && grep -q 'TrainingJob default/nope not found' <<<"$out" || fail "status of a missing job: $rc $out"
k wait --for condition=established --timeout=20s crd/clustertrainingruntimes.ringmaster.dev >/dev/null
k ringmaster runtimes | grep 'no runtimes in namespace default and none cluster-wide' >/dev/null || fail "runtimes: none yet"

KEEP_PODS=1 fast_job plug 2 12 | k apply -f - >/dev/null
wait_for 60 "plug trains" bash -c "[ \"\$(kubectl get tj plug -o jsonpath='{.status.progress.step}')\" -ge 50 ] 2>/dev/null"
k ringmaster status plug > "$T/status.txt"
grep -q '^TrainingJob default/plug   Running' "$T/status.txt" && grep -q 'workers     2/2 ready' "$T/status.txt" &&
  grep -q 'progress    step [0-9]* / 5616 ' "$T/status.txt" && grep -q '^events:' "$T/status.txt" &&
  grep -q 'TrainingJobRunning' "$T/status.txt" || fail "status: $(cat "$T/status.txt")"
log "status: $(sed -n 3p "$T/status.txt")"
# status.progress.percent / etaSeconds (Trainer v2's progressPercentage / estimatedRemainingSeconds)
# and the Progress column
pc=$(tj_field plug '{.status.progress.percent}'); eta=$(tj_field plug '{.status.progress.etaSeconds}')
$PY -c "import sys; p, e = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if 0 < p < 100 and e > 0 else 1)" "$pc" "$eta" ||
  fail "status.progress percent '$pc' etaSeconds '$eta'"
k get tj plug | sed -n 1p | grep 'PROGRESS' >/dev/null || fail "no Progress column: $(k get tj plug)"
k get tj plug -o wide | sed -n 1p | grep 'ETA' >/dev/null || fail "no ETA column in -o wide"

# follow every worker while worker 1 is deleted: its replacement's lines follow under [worker-1]
timeout 300 kubectl ringmaster logs plug -f > "$T/follow.txt" 2>"$T/follow.err" &
FPID=$!; PIDS+=("$FPID")
sleep 2
uid=$(k get pod plug-worker-1 -o 'jsonpath={.metadata.uid}')
ep0=$(tj_field plug '{.status.epoch}')
k delete pod plug-worker-1 --wait=false >/dev/null
wait_for 60 "a replacement" bash -c "u=\$(kubectl get pod plug-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [ -n \"\$u\" ] && [ \"\$u\" != $uid ]"
k ringmaster restart plug | grep 'restarting (2 worker pods deleted' >/dev/null || fail "restart"
wait_for 240 "plug Succeeded" tj_phase_is plug Succeeded
[ "$(tj_field plug '{.status.epoch}')" -ge $((ep0 + 2)) ] ||
  fail "the group did not re-form after a delete and a restart: epoch $ep0 -> $(tj_field plug '{.status.epoch}')"
wait_for 30 "logs -f ends with the job" bash -c "! kill -0 $FPID 2>/dev/null"
grep -q '^\[worker-0\] ' "$T/follow.txt" && grep -q '^\[worker-1\] ' "$T/follow.txt" || fail "follow: $(head "$T/follow.txt")"
# worker 1's first pod and at least one successor (a pod that lives shorter than the follower's
# 0.5 s poll may be missed, as its log is gone on a cluster too): rounds of two epochs or more
n1=$(grep '^\[worker-1\] .*msg="round ready"' "$T/follow.txt" | grep -o ' epoch=[0-9]*' | sort -u | wc -l)
[ "$n1" -ge 2 ] || fail "follow did not go on with worker 1's successor (rounds: $n1): $(grep '^\[worker-1\]' "$T/follow.txt" | grep 'round ready')"
! grep -v '^\[worker-[01]\] ' "$T/follow.txt" | grep -q . || fail "an unprefixed line: $(grep -v '^\[worker' "$T/follow.txt" | head -3)"
log "logs -f: $(wc -l < "$T/follow.txt") lines, worker 1 in rounds of $n1 epochs"

k ringmaster logs plug > "$T/merged.txt"
grep -q '^\[worker-0\] ts=' "$T/merged.txt" && grep -q '^\[worker-1\] ts=' "$T/merged.txt" || fail "merged logs"
$PY - "$T/merged.txt" <<'PY' || fail "merged logs are not in time order"
import re, sys
ts = [m.group(1) for l in open(sys.argv[1]) for m in [re.match(r"^\[worker-\d\] ts=(\S+) ", l)] if m]
assert len(ts) > 10 and ts == sorted(ts), (len(ts), [t for a, t in zip(ts, ts[1:]) if t < a][:3])
PY
k ringmaster logs plug --rank 1 --tail 5 > "$T/r1.txt"
[ "$(wc -l < "$T/r1.txt")" -eq 5 ] && ! grep -qv '^\[worker-1\] ' "$T/r1.txt" || fail "--rank 1 --tail 5: $(cat "$T/r1.txt")"
k ringmaster logs plug --role ps > "$T/ps.txt" 2>&1
grep -q 'has no pods that match' "$T/ps.txt" || fail "--role ps on an allreduce job: $(cat "$T/ps.txt")"
k ringmaster status plug | grep 'result      steps 5616' >/dev/null || fail "status of the finished job"

fast_job paused 1 1 | k apply -f - >/dev/null
k ringmaster suspend paused | grep -q 'suspended' || fail "suspend"
[ "$(tj_field paused '{.spec.runPolicy.suspend}')" = true ] || fail "suspend did not set the field"
wait_for 30 "Suspended" tj_phase_is paused Suspended
k ringmaster resume paused | grep -q 'resumed' || fail "resume"
wait_for 90 "resumed job Succeeded" tj_phase_is paused Succeeded
set +e; out=$(k ringmaster restart paused 2>&1); rc=$?; set -e
[ $rc -eq 1 ] && grep -q 'is Succeeded: nothing to restart' <<<"$out" || fail "restart of a finished job: $out"

# completion: the script, and the candidates it asks for (commands, flags, job names)
kubectl-ringmaster completion bash | grep -q 'complete -o default -F _kubectl_ringmaster kubectl-ringmaster' ||
  fail "completion script"
[ "$(kubectl-ringmaster __complete st)" = status ] || fail "complete a command"
kubectl-ringmaster __complete logs p | sort | tr '\n' ' ' | grep -q '^paused plug $' || fail "complete job names: $(kubectl-ringmaster __complete logs p)"
[ "$(kubectl-ringmaster __complete logs --ro)" = --role ] || fail "complete a flag"
[ "$(kubectl_complete-ringmaster status pl)" = plug ] || fail "kubectl_complete-ringmaster"
out=$(k ringmaster -n other status plug 2>&1) && fail "status in another namespace succeeded"
grep -q 'TrainingJob other/plug not found' <<<"$out" || fail "-n other: $out"
log "plugin: status, logs (merged, -f through a replacement, filters), restart, suspend/resume, completion"
