#!/usr/bin/env bash
# README "Failure semantics" row F10.
# Checkpoint folders (docs/architecture.md#robustness; runner + worker): checkpoints that could never
# be written, or a resume with nothing to resume, are refused up front instead of silently costing the
# user their work.
#   1. --checkpoint-dir that is a regular file, or /proc/self: exit 2 naming the folder, no worker;
#   2. --resume into an empty folder: exit 2, "nothing this job can continue from";
#   3. a run with hidden [128] leaves checkpoints; --resume of the same job with hidden [64]
#      (another model shape) exits 2 and touches none of them;
#   4. --resume=if-present with hidden [64] trains from step 0 and Succeeds, and its pruning
#      (keep 3) deletes none of the hidden-[128] run's checkpoints;
#   5. --resume of the hidden-[128] job continues from its own newest checkpoint.
source "$(dirname "$0")/5x-run-lib.bash"
RM=$RM_BIN/ringmaster
run() {   # run NAME ARGS...: RC, $W/NAME.out/.err
  local name=$1; shift
  set +e
  "$RM" run --run-dir "$W/run-$name" -o json "$@" >"$W/$name.out" 2>"$W/$name.err"
  RC=$?
  set -e
}
echo x > "$W/plainfile"
run file -f "$FIX/small.yaml" --checkpoint-dir "$W/plainfile"
[ $RC -eq 2 ] || fail "regular file as --checkpoint-dir: exit $RC, want 2"
grep -q "plainfile: not a directory" "$W/file.err" || fail "no clear message: $(cat "$W/file.err")"
run proc -f "$FIX/small.yaml" --checkpoint-dir /proc/self
[ $RC -eq 2 ] || fail "/proc/self as --checkpoint-dir: exit $RC, want 2"
grep -q "/proc/self: cannot create a file there" "$W/proc.err" || fail "no clear message: $(cat "$W/proc.err")"

run empty -f "$FIX/small.yaml" --checkpoint-dir "$W/ck-empty" --resume
[ $RC -eq 2 ] || fail "--resume with nothing there: exit $RC, want 2"
grep -q "nothing this job can continue from" "$W/empty.err" || fail "no loud message: $(cat "$W/empty.err")"

CK=$W/ck
run first -f "$FIX/small.yaml" --epochs 1 --checkpoint-dir "$CK"
[ $RC -eq 0 ] || fail "first run exit $RC"
before=$(ls "$CK" | grep -c '^ckpt-' || true)
[ "$before" -ge 1 ] || fail "first run left no checkpoints"
ls "$CK" | grep '^ckpt-' | sort > "$W/first.list"
sed 's/hidden: \[128\]/hidden: [64]/' "$FIX/small.yaml" > "$W/small64.yaml"
grep -q 'hidden: \[64\]' "$W/small64.yaml" || fail "fixture edit"
run other -f "$W/small64.yaml" --epochs 1 --checkpoint-dir "$CK" --resume
[ $RC -eq 2 ] || fail "--resume with another model shape: exit $RC, want 2"
grep -q "784-64-10" "$W/other.err" || fail "the refusal does not name the model: $(tail -3 "$W/other.err")"
ls "$CK" | grep '^ckpt-' | sort | cmp -s - "$W/first.list" || fail "the refused resume changed the checkpoints"

run ifp -f "$W/small64.yaml" --epochs 1 --checkpoint-dir "$CK" --resume=if-present
[ $RC -eq 0 ] || fail "--resume=if-present exit $RC"
grep -q "NOTHING TO RESUME" "$W/ifp.err" || fail "if-present did not warn"
[ "$(jget ifp 'j["status"]["result"]["steps"]')" = 468 ] || fail "if-present run did not start at step 0"
for f in $(cat "$W/first.list"); do [ -f "$CK/$f" ] || fail "pruning deleted the earlier model's $f"; done

run again -f "$FIX/small.yaml" --epochs 2 --checkpoint-dir "$CK" --resume
[ $RC -eq 0 ] || fail "--resume of the first model exit $RC"
grep -h "checkpoint loaded" "$W"/run-again/worker-0.log | grep -q "step=468 " || fail "did not continue from step 468: $(grep -h 'checkpoint loaded' "$W"/run-again/worker-*.log | head -2)"
assert_no_workers
log "PASS"
