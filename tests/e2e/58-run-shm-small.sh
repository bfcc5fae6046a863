#!/usr/bin/env bash
# ringmaster run where /dev/shm is too small for the shared-memory segment (a private 1 MiB tmpfs in
# a mount namespace): every worker says so naming /dev/shm, the formation falls back to the TCP ring
# at once (no wait for the formation timeout) and the job Succeeds. Needs a mount namespace (root);
# skipped where there is none.
source "$(dirname "$0")/5x-run-lib.bash"
if ! unshare -m true 2>/dev/null; then
  log "SKIP (no mount namespace here)"
  exit 0
fi
set +e
timeout 180 unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs -o size=1m tmpfs /dev/shm &&
  exec "$0" run -f "$1" --epochs 1 --checkpoint-dir "$2" --run-dir "$3"' \
  "$RM_BIN/ringmaster" "$FIX/small.yaml" "$W/ck-s" "$W/run-s" >"$W/s.out" 2>"$W/s.err"
RC=$?
set -e
[ $RC -eq 0 ] || fail "exit $RC"
grep -q "^Succeeded" "$W/s.out" || fail "no Succeeded line"
for i in 0 1; do
  f="$W/run-s/worker-$i.log"
  grep -q 'shared memory unusable, falling back to the TCP ring' "$f" || fail "worker $i did not fall back"
  grep -q 'falling back to the TCP ring.* err="shm: [^"]*/dev/shm' "$f" || fail "worker $i's reason does not name /dev/shm"
  grep -q 'round ready.*backend=ring' "$f" || fail "worker $i did not train over the ring"
done
assert_no_workers
log "PASS"
