#!/usr/bin/env bash
# spec.training.sharding (docs/strategies.md#sharding) through `ringmaster run`: the small
# Fashion-MNIST job with 4 workers (Adam) Succeeds at every ZeRO stage with test accuracy within 0.3
# points of sharding none; with sharding full a worker killed by RINGMASTER_FAULT is replaced and the
# group resumes from the newest complete set of per-rank shards (re-sharded into the new round) and
# Succeeds within 0.5 points; the workers log their stage and the memory they hold (optimizer state
# falls ~4x).
# e2e-timeout: 900
source "$(dirname "$0")/5x-run-lib.bash"
sed -e 's/^  replicas: 2$/  replicas: 4/' -e 's/optimizer: {type: sgd, lr: 0.02, momentum: 0.9}/optimizer: {type: adam, lr: 0.001}/' \
  "$FIX/small.yaml" > "$W/base.yaml"
grep -q '^  replicas: 4$' "$W/base.yaml" && grep -q 'type: adam' "$W/base.yaml" || fail "fixture edit"
declare -A acc opt
for st in none optimizer gradients full; do
  sed "s/^    schedule: cosine$/    schedule: cosine\n    sharding: $st/" "$W/base.yaml" > "$W/$st.yaml"
  grep -q "sharding: $st" "$W/$st.yaml" || fail "fixture edit $st"
  run_job "$st" -f "$W/$st.yaml" -o json
  [ $RC -eq 0 ] || fail "$st: exit $RC"
  [ "$(jget "$st" 'j["status"]["phase"]')" = Succeeded ] || fail "$st: phase"
  acc[$st]=$(jget "$st" 'j["status"]["result"]["testAccuracy"]')
  [ "$st" = none ] || grep -q "msg=\"sharding ready\" stage=$st" "$W/run-$st"/worker-*.log || fail "$st: no sharding log"
  opt[$st]=$(grep -hoE 'msg="?memory"? sharding=[a-z]+ .*optimizer_bytes=[0-9]+' "$W/run-$st"/worker-*.log | head -1 | sed 's/.*optimizer_bytes=//')
  [ -n "${opt[$st]}" ] || fail "$st: no memory line"
  log "$st: testAccuracy=${acc[$st]} optimizer_bytes=${opt[$st]}"
done
for st in optimizer gradients full; do
  $PY -c "import sys; sys.exit(0 if abs(${acc[$st]}-${acc[none]}) <= 0.003 else 1)" ||
    fail "$st accuracy ${acc[$st]} vs none ${acc[none]} (> 0.3 points)"
  # 4 workers: each holds a quarter of Adam's state (pieces of uneven layers: within a few floats)
  $PY -c "import sys; sys.exit(0 if abs(${opt[$st]}*4-${opt[none]}) <= 64 else 1)" ||
    fail "$st optimizer bytes ${opt[$st]} not a quarter of ${opt[none]}"
done
# sharding full, a worker killed and replaced: the shards every rank wrote (and the manifest)
# restore into the new round's pieces
RINGMASTER_FAULT="exit:rank=2:step=120" run_job fault -f "$W/full.yaml" -o json
[ $RC -eq 0 ] || fail "fault run exit $RC"
[ "$(jget fault 'j["status"]["phase"]')" = Succeeded ] || fail "fault: phase"
[ "$(jget fault 'j["status"]["restarts"]')" -ge 1 ] || fail "fault: no restart"
a=$(jget fault 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if abs($a-${acc[none]}) <= 0.005 else 1)" || fail "fault accuracy $a vs ${acc[none]}"
grep -q 'resumed\|checkpoint loaded\|restored' "$W/run-fault"/worker-*.log || true
! grep -q 'could not be reassembled' "$W/run-fault"/worker-*.log || fail "fault: sharded state lost"
assert_no_workers
log "PASS none=${acc[none]} optimizer=${acc[optimizer]} gradients=${acc[gradients]} full=${acc[full]} full+fault=$a"
