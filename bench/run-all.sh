#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other (they share 2 cores, so never in parallel),
# each writing bench/results/<area>.md; then BENCHMARKS.md is rebuilt from those files.
# BENCH="allreduce train" runs a subset.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export RM_BIN="${RM_BIN:-$root/bin}" RM_ROOT="$root"
declare -A entry=(
  [allreduce]=bench/allreduce/run.sh
  [train]=bench/train/run.sh
  [recovery]=bench/recovery/run.sh
  [e2e]=bench/e2e/run.sh
  [kubesim]=bench/kubesim/run.sh
  [operator]=bench/operator/run.sh
  [gpu]=bench/gpu/run.sh
)
order=(allreduce train recovery e2e kubesim operator gpu)
sel=(${BENCH:-${order[@]}})
rc=0
for b in "${sel[@]}"; do
  s="${entry[$b]:-}"
  if [ -z "$s" ] || [ ! -x "$s" ]; then echo "bench $b: no runnable $s, skipped"; continue; fi
  echo "=== bench $b ($s) ==="
  "$s" || { echo "bench $b failed"; rc=1; }
done
bench/assemble.sh
exit $rc
