#!/usr/bin/env bash
# The README's first command: the real deploy/examples/fashion-mnist.yaml (4 workers, 10 epochs,
# MLP 512-256) ends Succeeded with status.result.testAccuracy >= 0.88. About a minute on 2 cores.
source "$(dirname "$0")/5x-run-lib.bash"
run_job ex -f "$RM_ROOT/deploy/examples/fashion-mnist.yaml" -o json
[ $RC -eq 0 ] || fail "exit $RC"
[ "$(jget ex 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
acc=$(jget ex 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $acc >= 0.88 else 1)" || fail "testAccuracy $acc < 0.88"
assert_no_workers
log "PASS testAccuracy=$acc seconds=$(jget ex 'j["status"]["result"]["seconds"]')"
