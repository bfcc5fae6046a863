#!/usr/bin/env bash
# README "Failure semantics" row F7.
# e2e-timeout: 240
# A hung parameter server is replaced (docs/strategies.md#failure-semantics, "a server hangs"):
#  1. RINGMASTER_FAULT=hang:role=ps:index=1:step=120 makes server 1 keep its lock at version 120
#     (it answers nothing; its /healthz goes stalled after half of progressDeadlineSeconds): the
#     runner names it (role ps, index 1), SIGKILLs it, the replacement restores its shard from its
#     checkpoint and the job Succeeds without a group restart;
#  2. server 1 SIGSTOPped (worker 0 a straggler, so the job lasts): its /healthz stops answering, the
#     same follows.
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run-*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 20 "$f"; }; done >&2; }
cat > "$W/pshang.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: pshang}
spec:
  replicas: 2
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 0.2, progressDeadlineSeconds: 16}
  checkpoint: {intervalSteps: 50}
  training:
    model: {type: mlp, hidden: [64]}
    epochs: 1
    batchSizePerWorker: 128
    warmupEpochs: 0
YAML

# 1. the hang fault
t0=$SECONDS
RINGMASTER_FAULT="hang:role=ps:index=1:step=120" run_job hang -f "$W/pshang.yaml" -o json
[ $RC -eq 0 ] || { psdump; fail "hang: exit $RC"; }
[ "$(jget hang 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "hang: phase"; }
grep -q 'fault injected" kind=hang role=ps index=1 version=120' "$W/run-hang/ps-1.log" || { psdump; fail "the hang did not fire"; }
grep -q 'parameter server 1 (role ps, index 1) is hung' "$W/hang.err" || { psdump; fail "the hung server was not named"; }
grep -q 'parameter server hung" role=ps index=1 .*why=progress-deadline' "$W/hang.err" || fail "no log line for the hung server"
grep -q 'parameter server 1 was hung and is stopped; every server rolls back' "$W/hang.err" || fail "no replacement"
grep -q 'shard restored' "$W/run-hang/ps-1.log" || { psdump; fail "the replacement did not restore its shard"; }
[ "$(jget hang 'j["status"]["restarts"]')" = 0 ] || fail "a hung server restarted the workers"
log "hang fault: replaced in a run of $((SECONDS - t0))s"

# 2. SIGSTOP of server 1 once it applied 60 updates. Worker 0 is a straggler (10x its compute) so the
# job outlasts the poll: unslowed, the 234 steps took under a second on a fast machine and the job
# could end before the stop came
RINGMASTER_FAULT="slow:rank=0:factor=10" "$RM_BIN/ringmaster" run -f "$W/pshang.yaml" -o json --checkpoint-dir "$W/ck-stop" \
   --run-dir "$W/run-stop" >"$W/stop.out" 2>"$W/stop.err" &
RUNNER_PID=$!
pid=""; mport=""; reached=0
for i in $(seq 1 300); do
  line=$(grep -m1 'msg="parameter server started" index=1' "$W/stop.err" 2>/dev/null || true)
  pid=$(sed -n 's/.* pid=\([0-9]*\).*/\1/p' <<<"$line"); mport=$(sed -n 's/.*metrics=127.0.0.1:\([0-9]*\).*/\1/p' <<<"$line")
  [ -n "$mport" ] && curl -fsS --max-time 2 "http://127.0.0.1:$mport/metrics" 2>/dev/null |
    awk '/^ringmaster_ps_version\{/ {f=($2 >= 60)} END {exit !f}' && { reached=1; break; }
  kill -0 "$RUNNER_PID" 2>/dev/null || break
  sleep 0.2
done
[ -n "$pid" ] && [ $reached = 1 ] || { psdump; fail "server 1 was not seen at version 60 while the job ran (pid=$pid)"; }
kill -STOP "$pid"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 0 ] || { psdump; fail "stop: exit $rc"; }
[ "$(jget stop 'j["status"]["phase"]')" = Succeeded ] || fail "stop: phase"
# stopped, it cannot answer; on a slow machine its last answer before the stop may already have
# said stalled (workers waited on it past the deadline): either wording is the hang caught
grep -q 'parameter server 1 (role ps, index 1) is hung: its /healthz \(has not answered\|says stalled\)' "$W/stop.err" || { psdump; fail "the stopped server was not named"; }
grep -q 'parameter server 1 was hung and is stopped; every server rolls back' "$W/stop.err" || fail "stop: no replacement"
assert_no_workers
log "PASS: a hung and a stopped server were replaced; total $((SECONDS - t0))s"
