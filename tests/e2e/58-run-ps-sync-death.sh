#!/usr/bin/env bash
# README "Failure semantics" row F5.
# e2e-timeout: 900
# Synchronous parameter servers with b = 0 when a worker dies (docs/strategies.md, "Failure
# semantics": the servers proceed with the survivors once it is declared dead, and take the
# replacement back). Worker 2 exits at step 150 (RINGMASTER_FAULT); the test holds its replacement
# (SIGSTOP before it can join, SIGCONT once the servers went on with 3 for a while), so the survivors must train on without it:
# the controller's restart opens the next rendezvous epoch, the survivors re-join it in the
# background, their settled count (3) reaches the servers with the next requests, and each step is
# applied with the 3 survivors' gradients (learning rate by the linear rule). When the replacement
# joins, the round closes with 4 and the servers wait for 4 again. The job Succeeds.
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run-*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 20 "$f"; }; done >&2; }

cat > "$W/b0.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: b0}
spec:
  replicas: 4
  strategy: parameterServer
  parameterServer: {replicas: 2, mode: sync, backupWorkers: 0}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 120}
  checkpoint: {intervalSteps: 100}
  training:
    model: {type: mlp, hidden: [128]}
    epochs: 15
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
    warmupEpochs: 0
YAML
RINGMASTER_FAULT="exit:rank=2:step=150" "$RM_BIN/ringmaster" run -f "$W/b0.yaml" -o json \
   --checkpoint-dir "$W/ck-b0" --run-dir "$W/run-b0" >"$W/b0.out" 2>"$W/b0.err" &
RUNNER_PID=$!
step_of() { { curl -fsS --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null || true; } |
            awk '/^ringmaster_worker_step\{/ {print int($2)}'; }
# wait for the fault, then watch worker 0 while worker 2 is dead
m0=""
for i in $(seq 1 900); do
  m0=$(sed -n 's/.*worker started" index=0 .*metrics=127.0.0.1:\([0-9]*\).*/\1/p' "$W/b0.err" | tail -1)
  grep -q 'fault injected' "$W/run-b0/worker-2.log" 2>/dev/null && break
  sleep 0.2
done
grep -q 'fault injected' "$W/run-b0/worker-2.log" || { psdump; fail "the fault never fired"; }
a=$(step_of "$m0" || true)
log "worker 2 exited; worker 0 at step ${a:-?}"
pid2=""
for i in $(seq 1 300); do   # hold the replacement before it loads its data and joins
  pid2=$(sed -n 's/.*worker started" index=2 pid=\([0-9]*\).*/\1/p' "$W/b0.err" | sed -n 2p)
  [ -n "$pid2" ] && break
  sleep 0.05
done
[ -n "$pid2" ] || fail "no replacement for worker 2"
kill -STOP "$pid2"
grep -q 'round ready' <(sed -n '/incarnation 2/,$p' "$W/run-b0/worker-2.log") &&
  fail "the replacement joined before the test could hold it (raise its data load time?)"
for i in $(seq 1 300); do   # 60 s: declared dead, the survivors' re-joins settle, 3 go on
  grep -q 'a step now waits for 3 gradients' "$W/run-b0/ps-0.log" && break
  sleep 0.2
done
sleep 2
b=$(step_of "$m0" || true)
kill -CONT "$pid2"
log "worker 0 at step ${b:-?} without worker 2 (its replacement held, now released)"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 0 ] || { psdump; fail "b=0: exit $rc"; }
[ "$(jget b0 'j["status"]["phase"]')" = Succeeded ] || fail "b=0: phase"
[ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt $((a + 5)) ] ||
  { psdump; fail "b=0: the survivors did not train on without worker 2 (step ${a:-?} -> ${b:-?})"; }
for i in 0 1; do
  f="$W/run-b0/ps-$i.log"
  grep -q 'a step now waits for 3 gradients' "$f" || { psdump; fail "server $i never proceeded with 3"; }
  n3=$(grep -c 'step applied with the survivors' "$f" || true)
  [ "$n3" -ge 5 ] || { psdump; fail "server $i applied only $n3 steps with the survivors"; }
  grep -q 'step applied with the survivors.*gradients=3 live=3' "$f" ||
    { grep -E 'workers alive|with the survivors' "$f" | head -20 >&2; fail "server $i: never 3 gradients from 3 survivors"; }
  # after the replacement joined: 4 again
  awk '/a step now waits for 3 gradients/ {s=1} s && /a step now waits for 4 gradients/ {ok=1} END {exit !ok}' "$f" ||
    { psdump; fail "server $i never took the replacement back"; }
done
grep -q 're-joining in the background, training goes on' "$W/run-b0/worker-0.log" ||
  fail "worker 0 did not re-join in the background"
acc=$(jget b0 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $acc >= 0.8 else 1)" || fail "testAccuracy $acc < 0.8"
assert_no_workers
log "PASS b=0: worker 0 trained on without worker 2 (step $a -> $b), $n3 steps applied with 3 survivors, testAccuracy=$acc"
