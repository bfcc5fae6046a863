#!/usr/bin/env bash
# The worker swarm's two processes as bench/scale/run.sh drives them (docs/scale.md): a rendezvous
# alone (`ringmaster-worker swarm --serve`) and 4,096 simulated workers (`ringmaster-worker swarm`,
# joins without the peer list) form a round, lose one worker and form the next without it, and the
# results table says so with no protocol error (1,024 workers where the open-file hard limit is
# below ~4,500); a count above the open-file hard limit is refused naming it; a bad flag is a usage
# error (2). Both report modes (without and with held reports, docs/scale.md). About 40 s; each fault
# run is bounded at 45 s.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
hard=$(ulimit -Hn)
n=4096
if [ "$hard" != unlimited ] && [ "$hard" -lt 4500 ]; then
  n=1024
  echo "note: open-file hard limit $hard: $n workers instead of 4096"
fi
out=$(COUNTS=$n STEADY=2 SWARM_TIMEOUT=45 OUT=- "$RM_ROOT/bench/scale/run.sh" 2>&1) || { echo "$out"; echo "FAIL: bench/scale/run.sh"; exit 1; }
lines=$(echo "$out" | grep "^N=$n ") || { echo "$out"; echo "FAIL: no swarm line for N=$n"; exit 1; }
echo "$lines"
[ "$(grep -c . <<<"$lines")" = 2 ] && grep -q " hold=0 " <<<"$lines" && grep -q " hold=1 " <<<"$lines" ||
  { echo "FAIL: not one run each without and with held reports"; exit 1; }
while read -r line; do
  for want in rounds=2 round1_world=$n round2_world=$((n - 1)) errors=0; do
    grep -q " $want" <<<"$line" || { echo "FAIL: swarm line lacks $want: $line"; exit 1; }
  done
done <<<"$lines"
rows=$(echo "$out" | grep "^| $n |") || { echo "FAIL: no table row for N=$n"; exit 1; }
while read -r row; do
  [ "$(awk -F'|' '{gsub(/ /, "", $14); print $14}' <<<"$row")" = 0 ] || { echo "FAIL: errors in row: $row"; exit 1; }
done <<<"$rows"
echo "ok - $n simulated workers, without and with held reports: round of $n, one death, round of $((n - 1)), no protocol error"
if [ "$hard" != unlimited ] && [ "$hard" -lt 60000 ]; then
  rc=0; msg=$("$W" swarm --url http://127.0.0.1:9 --job a/b --token t --count $((hard + 1)) 2>&1) || rc=$?
  [ "$rc" = 2 ] && grep -q "count: .*hard limit" <<<"$msg" || { echo "FAIL: count over the limit: rc=$rc $msg"; exit 1; }
  echo "ok - a count over the hard open-file limit ($hard) is refused: $msg"
fi
rc=0; "$W" swarm --job a/b --token t --count x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: a bad --count exits $rc, not 2"; exit 1; }
echo "ok - a bad flag is a usage error"
