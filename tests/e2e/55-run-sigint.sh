#!/usr/bin/env bash
# Ctrl-C mid-run: the runner asks every worker to checkpoint and exit, exits 130, and leaves no
# process behind (checked in the process table); a second run with --resume continues from the
# checkpoint; kill -9 of the runner takes its workers down too (PR_SET_PDEATHSIG).
source "$(dirname "$0")/5x-run-lib.bash"
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-i" \
   --run-dir "$W/run-i" -o json >"$W/i.out" 2>"$W/i.err" &
RUNNER_PID=$!
# (the loop remembers seeing it: with keep 3 the file is pruned ~150 steps later, which on a loaded
# machine can fall between the loop's check and a second one)
seen=""
for i in $(seq 1 300); do
  ls "$W/ck-i"/ckpt-000000000100*.rmck >/dev/null 2>&1 && { seen=1; break; }
  sleep 0.1
done
[ -n "$seen" ] || fail "no step-100 checkpoint within 30 s"
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
# kill -9 of the runner: PR_SET_PDEATHSIG takes the workers down with it (no orphans).
# This runner also carries 150 extra environment variables: a worker inherits every one of them
# (a CI job's environment easily holds over 100; none may be dropped for want of room).
pad=(); for i in $(seq 1 150); do pad+=("RM_E2E_PAD_$i=v$i"); done
env "${pad[@]}" "$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 30 --checkpoint-dir "$W/ck-k" \
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
