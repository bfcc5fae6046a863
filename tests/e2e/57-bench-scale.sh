#!/usr/bin/env bash
# The worker swarm's two processes as bench/scale/run.sh drives them (docs/scale.md): a rendezvous
# alone (`ringmaster-worker swarm --serve`) and 64 simulated workers (`ringmaster-worker swarm`)
# form a round, lose one worker and form the next without it, and the results table says so with
# no protocol error; a count above the open-file hard limit is refused naming it; a bad flag is a
# usage error (2). About 15 s.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
out=$(COUNTS=64 STEADY=2 OUT=- "$RM_ROOT/bench/scale/run.sh" 2>&1) || { echo "$out"; echo "FAIL: bench/scale/run.sh"; exit 1; }
echo "$out" | grep '^N=64 '
line=$(echo "$out" | grep '^N=64 ')
for want in rounds=2 round1_world=64 round2_world=63 errors=0; do
  grep -q " $want" <<<"$line" || { echo "FAIL: swarm line lacks $want"; exit 1; }
done
row=$(echo "$out" | grep '^| 64 |') || { echo "FAIL: no table row for N=64"; exit 1; }
[ "$(awk -F'|' '{gsub(/ /, "", $13); print $13}' <<<"$row")" = 0 ] || { echo "FAIL: errors in row: $row"; exit 1; }
echo "ok - 64 simulated workers: round of 64, one death, round of 63, no protocol error"
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 60000 ]; then
  rc=0; msg=$("$W" swarm --url http://127.0.0.1:9 --job a/b --token t --count $((hard + 1)) 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q "count: .*hard limit" <<<"$msg" || { echo "FAIL: count over the limit: rc=$rc $msg"; exit 1; }
  echo "ok - a count over the hard open-file limit ($hard) is refused: $msg"
fi
rc=0; "$W" swarm --job a/b --token t --count x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: a bad --count exits $rc, not 2"; exit 1; }
echo "ok - a bad flag is a usage error"
