#!/usr/bin/env bash
# bench/scale/run.sh — the rendezvous at the size of a large job (runnable alone; docs/scale.md).
# For each N in COUNTS a fresh rendezvous (`ringmaster-worker swarm --serve`, its own process: the
# swarm's sockets and the rendezvous' together exceed one process's open files) and a worker swarm
# of N simulated workers (`ringmaster-worker swarm`, one process, epoll) measure:
#   formed/trained  the first round: every worker has its rank / every worker's first report was
#                   answered "continue" (seconds from the swarm's start; includes the kv bootstrap)
#   recovery        one worker dies 1 s after the first round trained, its neighbour notices 0.1 s
#                   later and re-joins; seconds from the death until the N-1 survivors have their
#                   new ranks / all reported in the new epoch (reports every REPORT s: a survivor
#                   learns of the new epoch from its next report)
#   rss/worker      the rendezvous' peak RSS (VmHWM) less its RSS before any worker came, over N
#   cpu             the rendezvous' CPU seconds for the whole run, and per heartbeat round (N reports)
#                   in a second run of STEADY seconds with every worker reporting every REPORT s
# The swarm's joins ask for no peer list ("peers": false, the ring neighbours only; docs/scale.md):
# at 16,384 workers the list is ~1.3 MB a reply. Each process needs one open file per worker (the
# rendezvous a few hundred more): a count that does not fit under the hard RLIMIT_NOFILE
# (`ulimit -Hn`) is skipped with a note.
# Env: COUNTS (default "1024 4096 16384"), HOLDS (default "0 1": every count without, then with,
# held reports: "hold": true, a survivor learns of the new epoch when it opens; docs/scale.md),
# REPORT (default 1), SETTLE (default 0.5: the elastic
# round of the survivors closes SETTLE s after its last join), STEADY (default 6), SWARM_TIMEOUT
# (default 120: the fault run's bound), RM_BIN, OUT (the results file, default
# bench/results/scale.md; "-" = stdout only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
counts=(${COUNTS:-1024 4096 16384})
report="${REPORT:-1}"
settle="${SETTLE:-0.5}"
steady="${STEADY:-6}"
swarm_timeout="${SWARM_TIMEOUT:-120}"
# HOLDS: the report modes, side by side (0: a survivor learns of the new epoch from its next report,
# as ringmaster-worker's reporter does; 1: held reports, it learns when the epoch opens)
read -r -a holds <<< "${HOLDS:-${HOLD:-0 1}}"
hardfd=$(ulimit -Hn)
out="${OUT:-$root/bench/results/scale.md}"
tmp=$(mktemp -d)
spid=""
cleanup() { [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
tck=$(getconf CLK_TCK)
serve() { # N
  : >"$tmp/srv"
  "$bin/ringmaster-worker" swarm --serve 127.0.0.1:0 --job bench/scale --token bench-token-0123456789 \
    --desired "$1" --min $(( $1 / 2 )) --settle "$settle" >"$tmp/srv" 2>&1 &
  spid=$!
  for _ in $(seq 1 100); do grep -q '^rendezvous listening' "$tmp/srv" && break; sleep 0.05; done
  port=$(sed -n 's/^rendezvous listening on .*:\([0-9]*\)$/\1/p' "$tmp/srv")
  [ -n "$port" ] || { echo "bench/scale: the rendezvous did not start:" >&2; cat "$tmp/srv" >&2; exit 1; }
}
stopsrv() { kill "$spid"; wait "$spid" 2>/dev/null || true; spid=""; }
kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
cpu() { awk -v t="$tck" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
swarm() { "$bin/ringmaster-worker" swarm --url "http://127.0.0.1:$port" --job bench/scale \
  --token bench-token-0123456789 "$@"; }
val() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
rows=()
load=$(cut -d' ' -f1-3 /proc/loadavg)
skipped=()
for h in "${holds[@]}"; do
hold=(); [ "$h" = 0 ] || hold=(--hold)
for n in "${counts[@]}"; do
  if [ "$hardfd" != unlimited ] && [ $(( n + 400 )) -gt "$hardfd" ]; then
    echo "bench/scale: N=$n skipped: needs about $(( n + 400 )) open files, the hard limit is $hardfd" >&2
    skipped+=("$n"); continue
  fi
  serve "$n"
  rss0=$(kib "$spid" VmRSS)
  ( m=0; while kill -0 "$spid" 2>/dev/null; do t=$(awk '/^Threads:/{print $2}' "/proc/$spid/status" 2>/dev/null || echo 0)
      [ "${t:-0}" -gt "$m" ] && m=$t && echo "$m" >"$tmp/threads"; sleep 0.2; done ) &
  line=$(swarm "${hold[@]}" --count "$n" --report "$report" --kill 1 --fault-at 1 --detect 0.1 --rounds 2 --timeout "$swarm_timeout" \
         2>"$tmp/swarm.err") || { echo "bench/scale: swarm of $n failed: $(cat "$tmp/swarm.err")" >&2; }
  echo "N=$n hold=$h $line"
  hwm=$(kib "$spid" VmHWM); threads=$(cat "$tmp/threads" 2>/dev/null || echo ?); c1=$(cpu "$spid")
  stopsrv
  serve "$n"
  s0=$(cpu "$spid")
  swarm "${hold[@]}" --count "$n" --report "$report" --no-kv --rounds 0 --timeout "$steady" >"$tmp/steady" 2>&1 || true
  s1=$(cpu "$spid")
  stopsrv
  per=$(awk -v a="$s0" -v b="$s1" -v s="$steady" -v r="$report" 'BEGIN{printf "%.3f", (b - a) / s * r}')
  perw=$(awk -v h="$hwm" -v z="$rss0" -v n="$n" 'BEGIN{printf "%.1f", (h - z) / n}')
  rows+=("| $n | $([ "$h" = 0 ] && echo no || echo yes) | $(val "$line" round1_formed_s) | $(val "$line" round1_trained_s) | $(val "$line" recovery_formed_s) | $(val "$line" recovery_trained_s) | $rss0 → $hwm | $perw | $threads | $c1 | $per | $(val "$line" reconnects) | $(val "$line" errors) |")
done
done
{
  echo "## Rendezvous at scale (simulated workers)"
  echo
  echo "\`bench/scale/run.sh\` (COUNTS=\"${counts[*]}\" HOLDS=\"${holds[*]}\" REPORT=$report SETTLE=$settle STEADY=$steady), $(nproc) cores,"
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F); load before the run: $load."
  echo "The rendezvous (\`ringmaster-worker swarm --serve\`) and the worker swarm (\`ringmaster-worker swarm\`,"
  echo "N simulated workers on one epoll loop, each on its own keep-alive connection from its own loopback"
  echo "address) run as two processes on the same cores. Times in seconds from the swarm's start (formed:"
  echo "every worker has its rank; trained: every worker's first report answered) and from the death of one"
  echo "worker (recovery); the survivors' round closes ${settle} s after its last join (the elastic settle),"
  echo "and a survivor learns of the new epoch from its next report (every ${report} s), or, with held"
  echo "reports, from its held report's answer when the epoch opens (docs/scale.md). RSS in KiB."
  echo "${NOTE:-Short runs on a machine shared with other builds: noisy.}"
  [ ${#skipped[@]} -eq 0 ] || echo "Skipped (open-file hard limit $hardfd): N = ${skipped[*]}."
  echo
  echo "| N | held reports | formed | trained | recovery formed | recovery trained | rendezvous RSS before → peak | KiB/worker | peak threads | CPU s (run) | CPU s per heartbeat round | reconnects | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$tmp/md"
cat "$tmp/md"
[ "$out" = "-" ] || cp "$tmp/md" "$out"
