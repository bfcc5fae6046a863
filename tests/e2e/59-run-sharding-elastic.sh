#!/usr/bin/env bash
# README "Failure semantics" row F1.
# Sharded, elastic checkpoints through `ringmaster run` (docs/strategies.md#sharding), sharding full
# with Adam:
#  1. 4 workers stop at maxSteps 150 and leave one shard file per rank plus a manifest per
#     checkpoint (nothing gathered into one file); the same job on 2 workers resumes from that
#     4-worker set (--resume; re-sharded onto 2 ranks), continues and Succeeds; a fresh run (no
#     --resume) removes the sets and starts at step 0;
#  2. 4 workers with minReplicas 3: rank 3 is killed by RINGMASTER_FAULT with node=lost, so its
#     replica can never be created again: the runner scales the job down to 3, the survivors
#     re-shard the newest 4-worker set onto 3 ranks, continue and Succeed.
# e2e-timeout: 900
source "$(dirname "$0")/5x-run-lib.bash"
sed -e 's/^  replicas: 2$/  replicas: 4/' \
    -e 's/optimizer: {type: sgd, lr: 0.02, momentum: 0.9}/optimizer: {type: adam, lr: 0.001}/' \
    -e 's/^    schedule: cosine$/    schedule: cosine\n    sharding: full/' "$FIX/small.yaml" > "$W/four.yaml"
grep -q '^  replicas: 4$' "$W/four.yaml" && grep -q 'sharding: full' "$W/four.yaml" || fail "fixture edit"
sed 's/^    sharding: full$/    sharding: full\n    maxSteps: 150/' "$W/four.yaml" > "$W/four-150.yaml"
sed 's/^  replicas: 4$/  replicas: 2/' "$W/four.yaml" > "$W/two.yaml"
sed 's/^  replicas: 4$/  replicas: 4\n  minReplicas: 3/' "$W/four.yaml" > "$W/elastic.yaml"
grep -q 'maxSteps: 150' "$W/four-150.yaml" && grep -q '^  minReplicas: 3$' "$W/elastic.yaml" || fail "fixture edit 2"

# ---- 1. a checkpoint from 4 workers resumes on 2
CK="$W/ck-resize"
set +e
"$RM_BIN/ringmaster" run --checkpoint-dir "$CK" --run-dir "$W/run-a" -f "$W/four-150.yaml" -o json >"$W/a.out" 2>"$W/a.err"
RC=$?
set -e
[ $RC -eq 0 ] || fail "4-worker run exit $RC"
[ "$(jget a 'j["status"]["phase"]')" = Succeeded ] || fail "4-worker run: phase"
m=$(ls "$CK" | grep -E '^manifest-000000000150-[0-9]+-4\.rmmf$' | head -1)
[ -n "$m" ] || fail "no manifest for step 150 of 4 ranks: $(ls "$CK" | tr '\n' ' ')"
for r in 0 1 2 3; do
  ls "$CK" | grep -qE "^shard-000000000150-[0-9]+-$r-of-4\.rmck$" || fail "no shard $r of step 150"
done
! ls "$CK" | grep -qE '^ckpt-.*\.rmck$' || fail "a whole (gathered) checkpoint was written: $(ls "$CK" | tr '\n' ' ')"
# keep 3 (the default): sets 50, 100, 150 -> 3 manifests, 12 shards
[ "$(ls "$CK" | grep -c '^manifest-')" = 3 ] || fail "manifests: $(ls "$CK" | tr '\n' ' ')"
[ "$(ls "$CK" | grep -c '^shard-')" = 12 ] || fail "shards: $(ls "$CK" | tr '\n' ' ')"
grep -qE 'msg="?sharded checkpoint complete"?' "$W/run-a"/worker-*.log || fail "no 'sharded checkpoint complete' log"
set +e
"$RM_BIN/ringmaster" run --checkpoint-dir "$CK" --run-dir "$W/run-b" -f "$W/two.yaml" --resume -o json >"$W/b.out" 2>"$W/b.err"
RC=$?
set -e
[ $RC -eq 0 ] || fail "2-worker resume exit $RC"
[ "$(jget b 'j["status"]["phase"]')" = Succeeded ] || fail "2-worker resume: phase"
for i in 0 1; do
  grep -qE "checkpoint loaded\"? path=$CK/manifest-000000000150-[0-9]+-4\.rmmf step=150 .*written_world=4 sharded=yes resharded_to=2" \
    "$W/run-b/worker-$i.log" || fail "worker $i did not resume the 4-rank set on 2 ranks"
done
! grep -q 'could not be reassembled' "$W/run-b"/worker-*.log || fail "resume: sharded state lost"
accb=$(jget b 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $accb >= 0.80 else 1)" || fail "resumed accuracy $accb < 0.80"
log "resize 4->2: resumed at step 150, testAccuracy=$accb"
# without --resume a run starts fresh: the earlier run's sets are removed, not loaded
sed 's/^    sharding: full$/    sharding: full\n    maxSteps: 20/' "$W/two.yaml" > "$W/two-20.yaml"
set +e
"$RM_BIN/ringmaster" run --checkpoint-dir "$CK" --run-dir "$W/run-c" -f "$W/two-20.yaml" -o json >"$W/c.out" 2>"$W/c.err"
RC=$?
set -e
[ $RC -eq 0 ] || fail "fresh run exit $RC"
grep -qE 'ringmaster: removed [0-9]+ files' "$W/c.err" "$W/c.out" || fail "the fresh run did not remove the earlier sets"
! grep -q 'checkpoint loaded' "$W/run-c"/worker-*.log || fail "the fresh run loaded an earlier run's set"
! ls "$CK" | grep -qE '^(manifest|shard)-000000000150-' || fail "step-150 set still there after a fresh run"

# ---- SIGTERM: every rank writes its shard on the way out, no collective: the set completes
"$RM_BIN/ringmaster" run -f "$W/four.yaml" --epochs 30 --checkpoint-dir "$W/ck-term" \
   --run-dir "$W/run-term" -o json >"$W/term.out" 2>"$W/term.err" &
RUNNER_PID=$!
for i in $(seq 1 600); do ls "$W/ck-term" 2>/dev/null | grep -qE '^manifest-0*[1-9][0-9]{2,}-' && break; sleep 0.1; done
ls "$W/ck-term" | grep -qE '^manifest-0*[1-9][0-9]{2,}-' || fail "no sharded checkpoint at step >= 100 within 60 s"
kill -TERM "$RUNNER_PID"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, want 143"
for i in 0 1 2 3; do
  awk '/SIGTERM: writing a checkpoint/ {t=1} t && /checkpoint written"? path=[^ ]*manifest-/ {ok=1} END {exit !ok}' \
    "$W/run-term/worker-$i.log" || fail "worker $i: no complete sharded checkpoint after SIGTERM"
done
tstep=$(awk '/SIGTERM: writing a checkpoint/ {t=1} t && /checkpoint written/ {sub(/.* step=/, ""); sub(/ .*/, ""); print; exit}' "$W/run-term/worker-0.log")
m=$(ls "$W/ck-term" | grep -E "^manifest-0*$tstep-[0-9]+-4\.rmmf$" || true)
[ -n "$m" ] || fail "no manifest for the SIGTERM step $tstep"
log "SIGTERM: sharded set written at step $tstep ($m)"

# ---- 2. a worker lost for good: elastic shrink 4 -> 3 with re-sharding
RINGMASTER_FAULT="exit:rank=3:step=120:node=lost" run_job lost -f "$W/elastic.yaml" -o json
[ $RC -eq 0 ] || fail "elastic run exit $RC"
[ "$(jget lost 'j["status"]["phase"]')" = Succeeded ] || fail "elastic run: phase"
grep -qE 'fault injected"? kind=exit rank=3 step=120' "$W/run-lost"/worker-*.log || fail "the fault did not fire"
grep -q 'cannot start: its node is lost' "$W/lost.err" "$W/run-lost/ringmaster.log" 2>/dev/null || fail "the lost replica was created again"
grep -q 'ScaledDown' "$W/lost.err" "$W/run-lost/ringmaster.log" 2>/dev/null || fail "no ScaledDown"
grep -qE 'round ready"? epoch=[0-9]+ world=3' "$W/run-lost"/worker-*.log || fail "no round of 3"
n=$(grep -lE 'checkpoint loaded"? path=[^ ]*/manifest-000000000100-[0-9]+-4\.rmmf step=100 .*written_world=4 sharded=yes resharded_to=3' \
  "$W/run-lost"/worker-*.log | wc -l)
[ "$n" = 3 ] || fail "$n survivors re-sharded the step-100 set of 4 onto 3 (want 3)"
ls "$W/ck-lost" | grep -qE '^manifest-[0-9]+-[0-9]+-3\.rmmf$' || fail "no 3-rank set written after the shrink"
[ "$(jget lost 'j["status"]["result"]["testAccuracy"]')" != None ] || fail "no accuracy"
accl=$(jget lost 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $accl >= 0.80 else 1)" || fail "elastic accuracy $accl < 0.80"
! grep -q 'could not be reassembled' "$W/run-lost"/worker-*.log || fail "elastic: sharded state lost"
assert_no_workers
log "PASS resize 4->2 acc=$accb; lost worker 4->3 acc=$accl"
