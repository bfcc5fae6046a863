#!/usr/bin/env bash
# Ctrl-C mid-run: the runner asks every worker to checkpoint and exit, exits 130, and leaves no
# process behind (checked in the process table); a second run with --resume continues from the
# checkpoint; SIGHUP acts as SIGTERM (exit 129); a Ctrl-C before any checkpoint does not promise
# --resume; a malformed RINGMASTER_FAULT is refused with exit 2; kill -9 of the runner takes its workers down too (PR_SET_PDEATHSIG).
source "$(dirname "$0")/5x-run-lib.bash"
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-i" \
   --run-dir "$W/run-i" -o json >"$W/i.out" 2>"$W/i.err" &
RUNNER_PID=$!
# a checkpoint at step >= 100 (keep: 3 prunes step 100 itself a moment later on a fast machine)
ckpt_past_100() { ls "$1" 2>/dev/null | grep -Eq '^ckpt-0*([1-9][0-9]{2,})(-[0-9]+)?\.rmck$'; }
for i in $(seq 1 300); do
  ckpt_past_100 "$W/ck-i" && break
  sleep 0.1
done
ckpt_past_100 "$W/ck-i" || fail "no checkpoint at step >= 100 within 30 s"
n=$(our_workers | wc -l)
[ "$n" = 2 ] || fail "$n workers running, want 2"
kill -INT "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 130 ] || fail "exit $rc, want 130"
assert_no_workers
grep -q "stopped by signal 2" "$W/i.err" || fail "no stop message"
grep -q "SIGTERM: writing a checkpoint" "$W/run-i/worker-0.log" || fail "rank 0 did not checkpoint on the way out"
step=$(tail -n 1 "$W/i.out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"]["progress"]["step"])')
# SIGTERM behaves the same (exit 143)
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-i" --resume \
   --run-dir "$W/run-t" -o json >"$W/t.out" 2>"$W/t.err" &
RUNNER_PID=$!
for i in $(seq 1 150); do grep -q "checkpoint loaded" "$W/run-t/worker-0.log" 2>/dev/null && break; sleep 0.1; done
grep -q "checkpoint loaded" "$W/run-t/worker-0.log" || fail "--resume: rank 0 did not load the checkpoint"
grep -q "ringmaster: removed" "$W/t.err" && fail "--resume removed the checkpoints"
kill -TERM "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, want 143"
assert_no_workers
# SIGHUP (a closed terminal) behaves like SIGTERM: workers checkpoint, the final JSON is printed
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-h" \
   --run-dir "$W/run-h" -o json >"$W/h.out" 2>"$W/h.err" &
RUNNER_PID=$!
for i in $(seq 1 300); do ckpt_past_100 "$W/ck-h" && break; sleep 0.1; done
kill -HUP "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 129 ] || fail "SIGHUP: exit $rc, want 129"
grep -q "SIGTERM: writing a checkpoint" "$W/run-h/worker-0.log" || fail "SIGHUP: rank 0 did not checkpoint"
[ "$(tail -n 1 "$W/h.out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["kind"])')" = TrainingJob ] ||
  fail "SIGHUP: no final JSON"
grep -q "continue with --resume" "$W/h.err" || fail "SIGHUP: no --resume hint although checkpoints exist"
# Ctrl-C before any checkpoint: no "continue with --resume" promise
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-n" \
   --run-dir "$W/run-n" >"$W/n.out" 2>"$W/n.err" &
RUNNER_PID=$!
for i in $(seq 1 100); do grep -q "worker started" "$W/n.err" 2>/dev/null && break; sleep 0.05; done
kill -INT "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 130 ] || fail "early Ctrl-C: exit $rc, want 130"
if ls "$W/ck-n"/ckpt-*.rmck >/dev/null 2>&1; then
  grep -q "continue with --resume" "$W/n.err" || fail "early Ctrl-C: checkpoints exist but no --resume hint"
  log "note: the workers were already training when Ctrl-C arrived"
else
  grep -q "continue with --resume" "$W/n.err" && fail "early Ctrl-C: promised --resume with no checkpoint written"
  grep -q "no checkpoint was written" "$W/n.err" || fail "early Ctrl-C: no explanation"
fi
assert_no_workers   # (covers the SIGHUP run too: one scan of the process table is slow on a loaded box)
# a malformed RINGMASTER_FAULT is refused before any worker starts (exit 2, the bad part named)
set +e
RINGMASTER_FAULT='exit:rank=0:stp=5' "$RM_BIN/ringmaster" run -f "$FIX/small.yaml" \
   --checkpoint-dir "$W/ck-f" --run-dir "$W/run-f" >"$W/f.out" 2>"$W/f.err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "malformed RINGMASTER_FAULT: exit $rc, want 2"
grep -q 'RINGMASTER_FAULT: unknown key "stp"' "$W/f.err" || fail "malformed RINGMASTER_FAULT: message: $(cat "$W/f.err")"
[ ! -e "$W/run-f/worker-0.log" ] || fail "malformed RINGMASTER_FAULT: a worker was started"
# kill -9 of the runner: PR_SET_PDEATHSIG takes the workers down with it (no orphans).
# This runner also carries 150 extra environment variables: a worker inherits every one of them
# (a CI job's environment easily holds over 100; none may be dropped for want of room).
pad=(); for i in $(seq 1 150); do pad+=("RM_E2E_PAD_$i=v$i"); done
# (--epochs 1000: the job must outlast the process-table scans below on a loaded machine)
env "${pad[@]}" "$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 1000 --checkpoint-dir "$W/ck-k" \
   --run-dir "$W/run-k" >"$W/k.out" 2>"$W/k.err" &
RUNNER_PID=$!
for i in $(seq 1 100); do [ "$(our_workers | wc -l)" = 2 ] && break; sleep 0.1; done
[ "$(our_workers | wc -l)" = 2 ] || fail "kill -9 case: workers did not start"
for p in $(our_workers); do
  n=$(tr '\0' '\n' < "/proc/$p/environ" | grep -c '^RM_E2E_PAD_[0-9]*=v[0-9]*$' || true)
  [ "$n" = 150 ] || fail "worker $p inherited $n of the runner's 150 extra environment variables"
done
kill -9 "$RUNNER_PID"; wait "$RUNNER_PID" 2>/dev/null || true; RUNNER_PID=""
for i in $(seq 1 50); do [ -z "$(our_workers)" ] && break; sleep 0.1; done
assert_no_workers
log "PASS (interrupted at step $step; $(grep -o 'checkpoint loaded.*step=[0-9]*' "$W/run-t/worker-0.log" | head -1))"
