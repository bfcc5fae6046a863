#!/usr/bin/env bash
# `make bench`: every benchmark, one after the other (they share 2 cores, so never in parallel).
# Most rewrite bench/results/<area>.md themselves; the others print their tables/JSON, kept in
# bench/results/raw/<area>.txt for the curated bench/notes/<area>.md to be updated from by hand.
# Then BENCHMARKS.md is rebuilt from both (bench/assemble.sh lists the parts). BENCH="allreduce train" runs a subset.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export RM_BIN="${RM_BIN:-$root/bin}" RM_ROOT="$root"
declare -A entry=(
  [allreduce]=bench/allreduce/run.sh
  [train]=bench/train/run.sh
  [checkpoint]=bench/checkpoint/run.sh
  [recovery]=bench/recovery/run.sh
  [chaos]=bench/chaos/run.sh
  [e2e]=bench/e2e/run.sh
  [kubesim]=bench/kubesim/run.sh
  [operator]=bench/operator/bench-operator.sh
  [gpu]=bench/gpu/run.sh
  [shard]=bench/shard/run.sh
  [ps]=bench/ps/run.sh
  [sweep]=bench/sweep/run.sh
  [shm]=bench/shm/run.sh
  [hier]=bench/hier/run.sh
  [topo]=bench/topo/run.sh
  [pipeline]=bench/pipeline/run.sh
  [tensor]=bench/tensor/run.sh
  [builds]=bench/builds/compare.sh
  [gpt]=bench/gpt/run.sh
  [fetch]=bench/fetch/run.sh
  [data]=bench/data/run.sh
  [scale]=bench/scale/run.sh
  [operator-scale]=bench/operator/scale.sh
)
order=(allreduce train checkpoint recovery chaos e2e kubesim operator gpu shard ps sweep shm hier topo pipeline tensor builds gpt fetch data scale operator-scale)
sel=(${BENCH:-${order[@]}})
rc=0
for b in "${sel[@]}"; do
  s="${entry[$b]:-}"
  if [ -z "$s" ] || [ ! -x "$s" ]; then echo "bench $b: no runnable $s, skipped"; continue; fi
  echo "=== bench $b ($s) ==="
  mkdir -p bench/results/raw
  "$s" 2>&1 | tee "bench/results/raw/$b.txt" || { echo "bench $b failed"; rc=1; }
done
bench/assemble.sh
exit $rc
