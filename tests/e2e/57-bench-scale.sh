#!/usr/bin/env bash
# The worker swarm's two processes as bench/scale/run.sh drives them (docs/scale.md): a rendezvous
# alone (`ringmaster-worker swarm --serve`) and 4,096 simulated workers (`ringmaster-worker swarm`,
# joins without the peer list) form a round, lose one worker and form the next without it, and the
# results table says so with no protocol error (1,024 workers where the open-file hard limit is
# below ~4,500); a count above the open-file hard limit is refused naming it; a bad flag is a usage
# error (2). About 20 s; the fault run is bounded at 45 s.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
hard=$(ulimit -Hn)
n=4096
if [ "$hard" != unlimited ] && [ "$hard" -lt 4500 ]; then
  n=1024
  echo "note: open-file hard limit $hard: $n workers instead of 4096"
fi
out=$(COUNTS=$n STEADY=2 SWARM_TIMEOUT=45 OUT=- "$RM_ROOT/bench/scale/run.sh" 2>&1) || { echo "$out"; echo "FAIL: bench/scale/run.sh"; exit 1; }
line=$(echo "$out" | grep "^N=$n ") || { echo "$out"; echo "FAIL: no swarm line for N=$n"; exit 1; }
echo "$line"
for want in rounds=2 round1_world=$n round2_world=$((n - 1)) errors=0; do
  grep -q " $want" <<<"$line" || { echo "FAIL: swarm line lacks $want"; exit 1; }
done
row=$(echo "$out" | grep "^| $n |") || { echo "FAIL: no table row for N=$n"; exit 1; }
[ "$(awk -F'|' '{gsub(/ /, "", $13); print $13}' <<<"$row")" = 0 ] || { echo "FAIL: errors in row: $row"; exit 1; }
echo "ok - $n simulated workers: round of $n, one death, round of $((n - 1)), no protocol error"
if [ "$hard" != unlimited ] && [ "$hard" -lt 60000 ]; then
  rc=0; msg=$("$W" swarm --url http://127.0.0.1:9 --job a/b --token t --count $((hard + 1)) 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q "count: .*hard limit" <<<"$msg" || { echo "FAIL: count over the limit: rc=$rc $msg"; exit 1; }
  echo "ok - a count over the hard open-file limit ($hard) is refused: $msg"
fi
rc=0; "$W" swarm --job a/b --token t --count x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: a bad --count exits $rc, not 2"; exit 1; }
echo "ok - a bad flag is a usage error"
