#!/usr/bin/env bash
# README "Failure semantics" rows F2, F4, F6, F7.
# The chaos soak's judge and a short soak (bench/chaos/, docs/strategies.md#failure-semantics).
# chaos.py check flags a restore older than a checkpoint every writer acknowledged, and a replaced
# parameter server that starts without its shard or restores an older one; it passes the logs of
# a sound recovery. Then bench/chaos/run.sh runs one job of each kind — allreduce, 2 pipeline
# stages, 2 parameter servers — with up to 2 faults each (worker kills, hangs and SIGSTOPs; server
# kills) and must report every job completed with no checkpoint lost.
source "$(dirname "$0")/5x-run-lib.bash"
C="$RM_ROOT/bench/chaos/chaos.py"

t() { echo "ts=2026-11-28T10:00:$1Z level=info comp=worker msg=\"$2\" $3"; }
mkdir -p "$W/good" "$W/lost" "$W/pipe" "$W/reset" "$W/old"
{ t 01.000 "checkpoint written" "path=a step=10 rank=0"; t 02.000 "checkpoint written" "path=a step=20 rank=0"
  t 03.000 "checkpoint loaded" "path=a step=20 rank=0"; } > "$W/good/worker-0.log"
t 03.100 "checkpoint loaded" "path=a step=20 rank=1" > "$W/good/worker-1.log"
printf '=== ringmaster: parameter server 0 incarnation 1 ===\n%s\n=== ringmaster: parameter server 0 incarnation 2 ===\n%s\n' \
  "$(t 01.0 'shard checkpoint written' 'path=p version=40')" "$(t 02.0 'shard restored' 'path=p version=40')" > "$W/good/ps-0.log"
$PY "$C" check "$W/good" > "$W/good.out" || fail "a sound recovery judged lost: $(cat "$W/good.out")"

cp "$W/good/worker-0.log" "$W/lost/"
t 03.100 "checkpoint loaded" "path=a step=10 rank=1" > "$W/lost/worker-1.log"
set +e; $PY "$C" check "$W/lost" > "$W/lost.out"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q 'rank 1 loaded step 10 .* after step 20 was acknowledged' "$W/lost.out" ||
  fail "a restore older than the acknowledged checkpoint passed: rc=$rc $(cat "$W/lost.out")"

# a sharded checkpoint is acknowledged once every writer logged it: stage 1 never wrote step 20
{ t 01.0 "checkpoint written" "path=m step=10 rank=0"; t 02.0 "checkpoint written" "path=m step=20 rank=0"
  t 05.0 "checkpoint loaded" "path=m step=10 rank=0"; } > "$W/pipe/worker-0.log"
t 01.5 "checkpoint written" "path=m step=10 rank=1" > "$W/pipe/worker-1.log"
$PY "$C" check "$W/pipe" > "$W/pipe.out" || fail "an unacknowledged sharded step counted: $(cat "$W/pipe.out")"

printf '=== ringmaster: parameter server 1 incarnation 1 ===\n%s\n=== ringmaster: parameter server 1 incarnation 2 ===\n%s\n' \
  "$(t 01.0 'shard checkpoint written' 'path=p version=40')" "$(t 02.0 'shard checkpoint written' 'path=p version=3')" > "$W/reset/ps-1.log"
set +e; $PY "$C" check "$W/reset" > "$W/reset.out"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q 'ps-1.log: incarnation 2 started without its shard after version 40 was written by every server' "$W/reset.out" ||
  fail "a server reset passed: rc=$rc $(cat "$W/reset.out")"
printf '=== ringmaster: parameter server 0 incarnation 1 ===\n%s\n%s\n=== ringmaster: parameter server 0 incarnation 2 ===\n%s\n' \
  "$(t 01.0 'shard checkpoint written' 'path=p version=40')" "$(t 01.5 'shard checkpoint written' 'path=p version=80')" \
  "$(t 02.0 'shard restored' 'path=p version=40')" > "$W/old/ps-0.log"
set +e; $PY "$C" check "$W/old" > "$W/old.out"; rc=$?; set -e
[ $rc -eq 1 ] && grep -q 'restored version 40 after version 80 was written by every server' "$W/old.out" ||
  fail "an older shard restored passed: rc=$rc $(cat "$W/old.out")"
# the servers' rollback: server 1 died before writing 80, so both go back to 40 — sound
mkdir -p "$W/roll"
printf '=== ringmaster: parameter server 0 incarnation 1 ===\n%s\n%s\n=== ringmaster: parameter server 0 incarnation 2 ===\n%s\n' \
  "$(t 01.0 'shard checkpoint written' 'path=p version=40')" "$(t 01.5 'shard checkpoint written' 'path=p version=80')" \
  "$(t 03.0 'shard restored' 'path=p version=40')" > "$W/roll/ps-0.log"
printf '=== ringmaster: parameter server 1 incarnation 1 ===\n%s\n=== ringmaster: parameter server 1 incarnation 2 ===\n%s\n' \
  "$(t 01.1 'shard checkpoint written' 'path=p version=40')" "$(t 03.0 'shard restored' 'path=p version=40')" > "$W/roll/ps-1.log"
$PY "$C" check "$W/roll" > "$W/roll.out" || fail "the servers' rollback to their common version judged lost: $(cat "$W/roll.out")"
log "chaos.py check: sound recovery and the servers' rollback pass; lost step, server reset, older shard flagged"

# the soak itself, bounded: 3 jobs, 2 faults at most each
set +e
CHAOS_OUT="$W/chaos.md" CHAOS_RAW="$W/raw" CHAOS_JOB_TIMEOUT=120 CHAOS_PS_HANGS=0 \
  timeout 400 bash "$RM_ROOT/bench/chaos/run.sh" 3 7 2 > "$W/soak.out" 2>&1
rc=$?; set -e
[ $rc -eq 0 ] || { cat "$W/soak.out" >&2; cat "$W"/raw/* >&2 2>/dev/null | tail -n 80; fail "chaos soak: exit $rc"; }
grep -q '^| \*\*all\*\* | 3 | 3 | 0 | 0 | .* | 0 | ' "$W/chaos.md" || fail "chaos report: $(cat "$W/chaos.md")"
log "chaos soak: $(grep '^| \*\*all' "$W/chaos.md")"
assert_no_workers
