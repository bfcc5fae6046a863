#!/usr/bin/env bash
# bench/chaos/run.sh — a chaos soak of `ringmaster run` (docs/architecture.md#robustness,
# docs/strategies.md#failure-semantics; `make bench`, not `make test`). Small jobs run one after
# another, cycling through three kinds — bench/chaos/job.yaml (allreduce, 2 workers),
# pipeline.yaml (2 pipeline stages) and ps.yaml (2 parameter servers, 2 async workers) — each with
# 1..MAXKILLS faults drawn by bench/chaos/chaos.py from SEED (so a run can be repeated): worker kills
# (RINGMASTER_FAULT exit, i.e. _exit(137)) and hangs at random steps, SIGSTOP of a worker once the
# job has written a random number of checkpoints, and for the servers kills at random versions
# (hangs and SIGSTOP too with CHAOS_PS_HANGS=1). Each job gets a time limit; one that hits it is
# reported as stuck. After each job, chaos.py check reads the logs: no restore may be older than a
# checkpoint every writer had acknowledged, and no replaced server may start without its shard.
# Reported per kind: jobs completed, failed, stuck; faults; restarts; lost checkpoints; recovery
# time p50/p99/max (the runner's "group training again recovery_seconds").
# Writes bench/results/chaos.md; logs of every job that did not complete cleanly go to
# bench/results/raw/. Usage: bench/chaos/run.sh [JOBS=60] [SEED=1] [MAXKILLS=3]
#   CHAOS_SECONDS=S   run jobs until S seconds have passed (JOBS is then a maximum)
#   CHAOS_KINDS="allreduce pipeline ps"   CHAOS_JOB_TIMEOUT=300   CHAOS_PS_HANGS=1
#   CHAOS_OUT=bench/results/chaos.md   CHAOS_RAW=bench/results/raw   (tests point them elsewhere)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
py=/usr/bin/python3
chaos="$root/bench/chaos/chaos.py"
jobs="${1:-60}"
seed="${2:-1}"
maxk="${3:-3}"
limit="${CHAOS_JOB_TIMEOUT:-300}"
secs_max="${CHAOS_SECONDS:-0}"
read -r -a kinds <<<"${CHAOS_KINDS:-allreduce pipeline ps}"
ps_hangs="${CHAOS_PS_HANGS:-1}"
out="${CHAOS_OUT:-$root/bench/results/chaos.md}"
raw="${CHAOS_RAW:-$root/bench/results/raw}"
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-chaos.XXXXXX")
trap 'rm -rf "$work"' EXIT
declare -A manifest=([allreduce]=job.yaml [pipeline]=pipeline.yaml [ps]=ps.yaml)

# one clean run per kind: the steps a completed job reports, and the servers' versions
declare -A steps versions
for k in "${kinds[@]}"; do
  "$bin/ringmaster" run -f "$root/bench/chaos/${manifest[$k]}" --checkpoint-dir "$work/ck-base" \
      --run-dir "$work/run-base" -o json >"$work/base.json" 2>"$work/base.err" ||
    { echo "chaos: the clean $k job failed:"; tail -n 20 "$work/base.err"; exit 1; }
  steps[$k]=$(tail -n 1 "$work/base.json" | $py -c 'import json,sys; print(json.load(sys.stdin)["status"]["result"]["steps"])')
  v=$(grep -ho 'shard checkpoint written.* version=[0-9]*' "$work/run-base"/ps-0.log 2>/dev/null |
      grep -o 'version=[0-9]*' | cut -d= -f2 | sort -n | tail -n 1 || true)
  versions[$k]=${v:-${steps[$k]}}
  echo "clean $k: ${steps[$k]} steps, servers' last version ${versions[$k]}"
  rm -rf "$work/ck-base" "$work/run-base"
done

# SIGSTOP one process of the job once the logs show n checkpoints: stop = worker:R:n | ps:I:n
stopper() { # runner-pid run-dir stop
  local runner=$1 rd=$2 what=${3%%:*} rest=${3#*:} idx n logs pat pid p
  idx=${rest%%:*} n=${rest#*:}
  if [ "$what" = ps ]; then logs="$rd/ps-$idx.log"; pat='shard checkpoint written'
  else logs="$rd/worker-*.log $rd/ps-0.log"; pat='checkpoint written'; fi
  while kill -0 "$runner" 2>/dev/null; do
    # shellcheck disable=SC2086
    [ "$(cat $logs 2>/dev/null | grep -c "$pat" || true)" -ge "$n" ] && break
    sleep 0.05
  done
  for p in $(pgrep -P "$runner" -f ringmaster-worker || true); do
    if [ "$what" = ps ]; then grep -qz "^RINGMASTER_PS_INDEX=$idx\$" "/proc/$p/environ" 2>/dev/null || continue
    else grep -qz '^RINGMASTER_ROLE=ps$' "/proc/$p/environ" 2>/dev/null && continue
      grep -qz "^RANK=$idx\$" "/proc/$p/environ" 2>/dev/null || continue; fi
    pid=$p; break
  done
  [ -n "${pid:-}" ] && kill -STOP "$pid" 2>/dev/null && echo "stopped $3 pid $pid"
}

cnt() { local n; n=$(grep -c "$1" "$2" 2>/dev/null) || true; echo "${n:-0}"; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
: > "$work/jobs.tsv"
for j in $(seq 1 "$jobs"); do
  [ "$secs_max" -gt 0 ] && [ $(( $(date +%s) - t0 )) -ge "$secs_max" ] && break
  kind=${kinds[$(( (j - 1) % ${#kinds[@]} ))]}
  IFS='|' read -r faults stops wf sf < <($py "$chaos" faults "$kind" "$seed" "$j" "$maxk" \
      "${steps[$kind]}" "${versions[$kind]}" "$ps_hangs")
  rd="$work/run-$j"
  set +e
  RINGMASTER_FAULT="$faults" timeout --kill-after=10 "$limit" "$bin/ringmaster" run \
      -f "$root/bench/chaos/${manifest[$kind]}" --checkpoint-dir "$work/ck-$j" --run-dir "$rd" \
      -o json >"$work/out-$j.json" 2>"$work/err-$j.txt" &
  tpid=$!
  set -e
  sleep 0.2
  runner=$(pgrep -P "$tpid" -f 'ringmaster run' | head -n 1 || true)
  spids=()
  for s in $stops; do
    [ -n "$runner" ] && { stopper "$runner" "$rd" "$s" >>"$work/stops-$j.txt" 2>&1 & spids+=($!); }
  done
  set +e; wait "$tpid"; rc=$?; set -e
  for p in "${spids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  fired=$(cnt '^stopped' "$work/stops-$j.txt")
  wf=$(( wf + $(cnt '^stopped worker' "$work/stops-$j.txt") ))
  sf=$(( sf + $(cnt '^stopped ps' "$work/stops-$j.txt") ))
  phase=stuck; got=0; restarts=0
  if [ $rc -ne 124 ] && [ $rc -ne 137 ]; then
    read -r phase got restarts < <(tail -n 1 "$work/out-$j.json" | $py -c '
import json, sys
try:
    s = json.load(sys.stdin)["status"]
    print(s.get("phase", "?"), s.get("result", {}).get("steps", 0), s.get("restarts", 0))
except Exception:
    print("noresult", 0, 0)') || true
  fi
  lost=$($py "$chaos" check "$rd" | tee "$work/lost-$j.txt" | wc -l || true)
  recs=$(grep -o 'recovery_seconds=[0-9.]*' "$work/err-$j.txt" | cut -d= -f2 | tr '\n' ',' || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$j" "$rc" "$phase" "$got" "${steps[$kind]}" \
      "$kind" "$wf" "$sf" "$fired" "$restarts" "$lost" "${recs:-none}" "$faults${stops:+ stops: $stops}" |
    tee -a "$work/jobs.tsv"
  keep=""
  [ "$phase" = Succeeded ] || keep=$phase
  [ -n "$keep" ] || [ "$got" = "${steps[$kind]}" ] || keep=steps$got
  [ -n "$keep" ] || [ "$lost" = 0 ] || keep=lost$lost
  [ -n "$keep" ] || [ "$kind" = ps ] || [ "$restarts" = "$wf" ] || keep="restarts$restarts-faults$wf"
  if [ -n "$keep" ]; then
    mkdir -p "$raw"
    cp "$work/err-$j.txt" "$raw/chaos-job-$j-$keep.txt" 2>/dev/null || true
    cat "$work/lost-$j.txt" "$work/stops-$j.txt" >>"$raw/chaos-job-$j-$keep.txt" 2>/dev/null || true
    for f in "$rd"/worker-*.log "$rd"/ps-*.log; do
      [ -f "$f" ] && { echo "==== $(basename "$f")"; cat "$f"; }
    done > "$raw/chaos-job-$j-$keep-logs.txt" 2>/dev/null || true
  fi
  rm -rf "$work/ck-$j" "$rd"
done
secs=$(( $(date +%s) - t0 ))
load1=$(cut -d' ' -f1-3 /proc/loadavg)
cmd="bench/chaos/run.sh $jobs $seed $maxk"
[ "$secs_max" -gt 0 ] && cmd="CHAOS_SECONDS=$secs_max $cmd"
$py "$chaos" report "$work/jobs.tsv" "$out" "cmd=$cmd" "secs=$secs" \
    "ncpu=$(nproc)" "load0=$load0" "load1=$load1" "limit=$limit" "seed=$seed" "maxk=$maxk"
[ -z "$(awk -F'\t' '$3 != "Succeeded" || $4 != $5 || $11 != 0' "$work/jobs.tsv")" ]
