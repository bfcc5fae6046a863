#!/usr/bin/env bash
# e2e-timeout: 1200
# Sandblaster L-BFGS with `ringmaster run` (docs/strategies.md#sandblaster-l-bfgs):
# deploy/examples/fashion-mnist-lbfgs.yaml (4 workers, 2 server shards, server 0 hosting the
# coordinator, 16 portions per pass, 12 passes)
#  1. Succeeds with no restart; the coordinator ran every pass and accepted line-search steps; the
#     loss fell; server 0's metrics carry passes, line-search trials, gradient norm, loss per pass
#     and portions per worker, and every worker completed portions (on demand);
#  2. a worker killed mid-pass (exit:rank=1:step=20, inside its second portion of 15 batches): its
#     outstanding portion goes back to the queue and is done by another worker; the job Succeeds;
#  3. a server killed as its 5th pass begins (exit:role=ps:index=1:step=5; a server's version counts
#     passes): it is replaced and restores its shard and its L-BFGS vectors (the last accepted point
#     and the (s, y) history) from its checkpoint; the coordinator sees the new shard, finds every
#     shard at its last commit, resumes from there with the history kept, and the job Succeeds;
#  4. server 0 — the coordinator's host — killed as its 5th pass begins: the replacement restores
#     its shard, its vectors and the coordinator's state file, resumes the last accepted point with
#     the history, and every pass' loss from there on equals the uninterrupted run's (part 1).
source "$(dirname "$0")/5x-run-lib.bash"
psdump() { for f in "$W"/run-*/ps-*.log; do [ -f "$f" ] && { echo "---- $f (tail)"; tail -n 30 "$f"; }; done >&2; }
EX="$RM_ROOT/deploy/examples/fashion-mnist-lbfgs.yaml"

# 1. the job, its metrics while it runs
"$RM_BIN/ringmaster" run -f "$EX" -o json --checkpoint-dir "$W/ck-lb" --run-dir "$W/run-lb" \
   >"$W/lb.out" 2>"$W/lb.err" &
RUNNER_PID=$!
mport=""
for i in $(seq 1 300); do
  line=$(grep -m1 'msg="parameter server started" index=0' "$W/lb.err" 2>/dev/null || true)
  if [ -n "$line" ]; then mport=$(sed -n 's/.*metrics=127.0.0.1:\([0-9]*\).*/\1/p' <<<"$line"); break; fi
  sleep 0.2
done
[ -n "$mport" ] || { psdump; fail "no 'parameter server started' line"; }
ok=0
for i in $(seq 1 900); do
  if curl -fsS --max-time 2 "http://127.0.0.1:$mport/metrics" -o "$W/m.txt" 2>/dev/null &&
     awk '/^ringmaster_lbfgs_passes_total\{/ {f=1; exit !($2 >= 3)} END {if (!f) exit 1}' "$W/m.txt"; then ok=1; break; fi
  sleep 0.2
done
[ $ok = 1 ] || { psdump; fail "the coordinator never completed 3 passes"; }
J='job="default/fashion-mnist-lbfgs"'
for m in ringmaster_lbfgs_passes_total ringmaster_lbfgs_line_search_trials_total \
         ringmaster_lbfgs_gradient_norm ringmaster_lbfgs_loss ringmaster_lbfgs_portions_reissued_total; do
  grep -q "^$m{$J}" "$W/m.txt" || fail "metric $m missing"
done
for w in 0 1 2 3; do
  grep -q "^ringmaster_lbfgs_portions_total{$J,worker=\"$w\"}" "$W/m.txt" || fail "portions of worker $w missing"
done
set +e; wait "$RUNNER_PID"; RC=$?; set -e; RUNNER_PID=""
[ $RC -eq 0 ] || { psdump; fail "exit $RC"; }
[ "$(jget lb 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "phase"; }
[ "$(jget lb 'j["status"]["restarts"]')" = 0 ] || fail "restarts"
P0="$W/run-lb/ps-0.log"
grep -q 'msg="lbfgs done" passes=12' "$P0" || { psdump; fail "the coordinator did not finish its 12 passes"; }
[ "$(grep -c 'lbfgs step accepted' "$P0")" -ge 5 ] || { psdump; fail "fewer than 5 accepted L-BFGS steps"; }
first=$(grep -m1 ' pass=0 ' "$P0" | sed -n 's/.* loss=\([0-9.]*\).*/\1/p')
last=$(sed -n 's/.*msg="lbfgs done" passes=[0-9]* loss=\([0-9.]*\).*/\1/p' "$P0")
$PY -c "import sys; sys.exit(0 if $last < 0.6 * $first else 1)" || fail "loss $first -> $last did not fall by 40%"
# every worker took portions (on demand), and every portion of every pass counted exactly once
per_worker() { sed -n 's/.*msg="lbfgs done" .*portions_per_worker=\([0-9,]*\).*/\1/p' "$1"; }
check_portions() {  # LOG: 4 workers, 12 passes x 16 portions, each won once
  $PY - "$(per_worker "$1")" <<'PY' || fail "portions per worker: $(per_worker "$1")"
import sys
c = [int(x) for x in sys.argv[1].split(",")]
sys.exit(0 if len(c) == 4 and sum(c) == 12 * 16 and min(c) > 0 else 1)
PY
}
check_portions "$P0"
acc=$(jget lb 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $acc >= 0.6 else 1)" || fail "testAccuracy $acc < 0.6 after 12 passes"
assert_no_workers
log "L-BFGS job: loss $first -> $last testAccuracy=$acc"

# 2. a worker killed mid-pass
RINGMASTER_FAULT="exit:rank=1:step=20" run_job kill -f "$EX" -o json
[ $RC -eq 0 ] || { psdump; fail "worker kill: exit $RC"; }
[ "$(jget kill 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "worker kill: phase"; }
K0="$W/run-kill/ps-0.log"
grep -q 'fault injected' "$W"/run-kill/worker-1*.log 2>/dev/null || grep -q 'fault injected' "$W/kill.err" ||
  { psdump; fail "the fault did not fire"; }
grep -Eq 'msg="lbfgs worker lost" worker=[0-9]+ portions_requeued=1' "$K0" ||
  { psdump; fail "the dead worker's portion was not requeued"; }
grep -q 'msg="lbfgs done" passes=12' "$K0" || { psdump; fail "the coordinator did not finish after the kill"; }
check_portions "$K0"
assert_no_workers
log "PASS worker killed mid-pass: $(grep -m1 'lbfgs worker lost' "$K0" | sed 's/.*msg=//')"

# 3. a server killed mid-run
RINGMASTER_FAULT="exit:role=ps:index=1:step=5" run_job srv -f "$EX" -o json
[ $RC -eq 0 ] || { psdump; fail "server kill: exit $RC"; }
[ "$(jget srv 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "server kill: phase"; }
S0="$W/run-srv/ps-0.log"; S1="$W/run-srv/ps-1.log"
grep -q 'fault injected" kind=exit role=ps index=1 version=5' "$S1" || { psdump; fail "the server fault did not fire"; }
grep -q 'parameter server 1 exited; replacing it' "$W/srv.err" || fail "no replacement"
grep -q 'shard restored' "$S1" || { psdump; fail "the replacement did not restore its shard"; }
grep -q 'lbfgs vectors restored' "$S1" || { psdump; fail "the replacement did not restore its L-BFGS vectors"; }
grep -q 'lbfgs: server 1 was replaced' "$S0" || { psdump; fail "the coordinator did not notice the new shard"; }
grep -q 'msg="lbfgs resumed at the last accepted point"' "$S0" || { psdump; fail "the coordinator did not resume the last commit"; }
grep -q 'msg="lbfgs done" passes=12' "$S0" || { psdump; fail "the coordinator did not finish after the server died"; }
first=$(grep -m1 ' pass=0 ' "$S0" | sed -n 's/.* loss=\([0-9.]*\).*/\1/p')
last=$(sed -n 's/.*msg="lbfgs done" passes=[0-9]* loss=\([0-9.]*\).*/\1/p' "$S0")
$PY -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)" || fail "server kill: loss $first -> $last"
assert_no_workers
log "PASS server killed and replaced: loss $first -> $last"

# 4. server 0 (the coordinator) killed mid-run: the resumed run retraces the uninterrupted one
RINGMASTER_FAULT="exit:role=ps:index=0:step=5" run_job s0 -f "$EX" -o json
[ $RC -eq 0 ] || { psdump; fail "server 0 kill: exit $RC"; }
[ "$(jget s0 'j["status"]["phase"]')" = Succeeded ] || { psdump; fail "server 0 kill: phase"; }
Z0="$W/run-s0/ps-0.log"
grep -q 'fault injected" kind=exit role=ps index=0 version=5' "$Z0" || { psdump; fail "the server 0 fault did not fire"; }
grep -q 'msg="lbfgs coordinator state restored"' "$Z0" || { psdump; fail "the coordinator state was not restored"; }
grep -q 'msg="lbfgs resumed at the last accepted point"' "$Z0" || { psdump; fail "the new coordinator did not resume"; }
grep -q 'msg="lbfgs done" passes=12' "$Z0" || { psdump; fail "the coordinator did not finish its budget after a restart"; }
passes() { sed -n 's/.*msg="lbfgs pass done" pass=\([0-9]*\) .* loss=\([0-9.]*\).*/\1 \2/p' "$1"; }
$PY - <(passes "$P0") <(passes "$Z0") <<'PY' || fail "the resumed run's losses differ from the uninterrupted run's"
import sys
ref = dict(l.split() for l in open(sys.argv[1]))
got = [l.split() for l in open(sys.argv[2])]
ok = len(got) >= 12 and all(abs(float(ref[p]) - float(v)) <= 1e-3 * float(ref[p]) for p, v in got)
sys.exit(0 if ok else 1)
PY
assert_no_workers
log "PASS server 0 killed: the coordinator resumed at its last commit and retraced the run"
