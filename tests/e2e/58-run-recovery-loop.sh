#!/usr/bin/env bash
# A job whose group can only re-form, never train (docs/architecture.md#robustness: a global batch
# larger than the training set re-formed 13,772 times in 90 s with "step 0/0") must not spin: the
# controller's recovery-loop rule (reconcile.h R10) fails it with reason RecoveryLoop within seconds — or
# validation refuses the manifest outright (exit 2), which is just as good.
source "$(dirname "$0")/5x-run-lib.bash"
sed 's/batchSizePerWorker: 64/batchSizePerWorker: 40000/' "$FIX/small.yaml" > "$W/huge-batch.yaml"
grep -q 'batchSizePerWorker: 40000' "$W/huge-batch.yaml" || fail "fixture edit"
start=$(date +%s)
set +e
timeout --kill-after=10 240 "$RM_BIN/ringmaster" run -f "$W/huge-batch.yaml" --checkpoint-dir "$W/ck" \
   --run-dir "$W/run" -o json >"$W/o.out" 2>"$W/o.err"
rc=$?
set -e
took=$(( $(date +%s) - start ))
assert_no_workers
case $rc in
  2) grep -q "batchSizePerWorker" "$W/o.err" || fail "exit 2 without naming the field: $(cat "$W/o.err")"
     log "PASS (refused by validation in ${took}s)" ;;
  1) [ "$(tail -n 1 "$W/o.out" | $PY -c 'import json,sys; j=json.load(sys.stdin); print(j["status"]["conditions"][[c["type"] for c in j["status"]["conditions"]].index("Failed")]["reason"])')" = RecoveryLoop ] ||
       fail "exit 1 but not RecoveryLoop: $(tail -n 3 "$W/o.err")"
     grep -q "RecoveryLoop" "$W/o.err" || fail "the reason is not shown"
     log "PASS (RecoveryLoop after ${took}s)" ;;
  *) fail "exit $rc after ${took}s (124: still looping when the test gave up)" ;;
esac
