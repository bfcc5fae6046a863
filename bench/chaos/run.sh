#!/usr/bin/env bash
# bench/chaos/run.sh — a bounded chaos soak of `ringmaster run` (docs/architecture.md#robustness; `make
# bench`, not `make test`). JOBS small jobs (bench/chaos/job.yaml: 2 workers, 3 epochs of 117 steps,
# checkpoints every 10) run one after another, each with 1..MAXKILLS worker deaths
# (RINGMASTER_FAULT exit, i.e. _exit(137)) at random steps of the whole run — epoch boundaries and
# the steps between a boundary and the next checkpoint included — on random ranks, seeded by SEED
# so a run can be repeated. Each job gets a time limit; one that hits it is reported as stuck.
# Reported: jobs completed (Succeeded with all 351 steps), failed, stuck; restarts (the runner's
# status.restarts, which must equal the kills); recovery time p50/p99/max (the runner's "group
# training again recovery_seconds", failure detected -> group training again).
# Writes bench/results/chaos.md. Usage: bench/chaos/run.sh [JOBS=50] [SEED=1] [MAXKILLS=3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
jobs="${1:-50}"
seed="${2:-1}"
maxk="${3:-3}"
limit="${CHAOS_JOB_TIMEOUT:-300}"
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-chaos.XXXXXX")
trap 'rm -rf "$work"' EXIT
steps=351
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
: > "$work/jobs.txt"
for j in $(seq 1 "$jobs"); do
  faults=$(/usr/bin/python3 -c "
import random
r = random.Random($seed * 100003 + $j)
k = r.randint(1, $maxk)
steps = sorted(r.sample(range(1, $steps), k))
print(';'.join(f'exit:rank={r.randint(0, 1)}:step={s}' for s in steps))")
  kills=$(tr ';' '\n' <<<"$faults" | grep -c exit)
  set +e
  RINGMASTER_FAULT="$faults" timeout --kill-after=10 "$limit" "$bin/ringmaster" run \
      -f "$root/bench/chaos/job.yaml" --checkpoint-dir "$work/ck-$j" --run-dir "$work/run-$j" \
      -o json >"$work/out-$j.json" 2>"$work/err-$j.txt"
  rc=$?
  set -e
  phase=stuck; got=0; restarts=0
  if [ $rc -ne 124 ] && [ $rc -ne 137 ]; then
    read -r phase got restarts < <(tail -n 1 "$work/out-$j.json" | /usr/bin/python3 -c '
import json, sys
try:
    s = json.load(sys.stdin)["status"]
    print(s.get("phase", "?"), s.get("result", {}).get("steps", 0), s.get("restarts", 0))
except Exception:
    print("noresult", 0, 0)') || true
  fi
  recs=$(grep -o 'recovery_seconds=[0-9.]*' "$work/err-$j.txt" | cut -d= -f2 | tr '\n' ',' || true)
  echo "$j $rc $phase $got $kills $restarts ${recs:-none} $faults" | tee -a "$work/jobs.txt"
  # keep the runner's log of every job that did not succeed or counted restarts other than its kills
  keep=""
  [ "$phase" = Succeeded ] || keep="$phase"
  [ -n "$keep" ] || [ "$restarts" = "$kills" ] || keep="restarts$restarts-kills$kills"
  if [ -n "$keep" ]; then
    mkdir -p "$root/bench/results/raw"
    cp "$work/err-$j.txt" "$root/bench/results/raw/chaos-job-$j-$keep.txt" 2>/dev/null || true
    cat "$work/run-$j"/worker-*.log > "$root/bench/results/raw/chaos-job-$j-$keep-workers.txt" 2>/dev/null || true
  fi
  rm -rf "$work/ck-$j" "$work/run-$j"
done
secs=$(( $(date +%s) - t0 ))
load1=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$work/jobs.txt" "$jobs" "$seed" "$maxk" "$secs" "$load0" "$load1" "$(nproc)" \
    "$steps" "$limit" "$root/bench/results/chaos.md" <<'PY'
import statistics, sys
f, jobs, seed, maxk, secs, load0, load1, ncpu, steps, limit, out = sys.argv[1:12]
rows = [l.split(" ", 7) for l in open(f) if l.strip()]
done = [r for r in rows if r[2] == "Succeeded" and r[3] == steps]
stuck = [r for r in rows if r[2] == "stuck"]
other = [r for r in rows if r not in done and r not in stuck]
kills = sum(int(r[4]) for r in rows)
restarts = sum(int(r[5]) for r in rows)
mism = [r for r in done if r[4] != r[5]]
rec = sorted(float(x) for r in rows if r[6] != "none" for x in r[6].split(",") if x)
def pct(p):
    return rec[min(len(rec) - 1, int(round(p / 100 * (len(rec) - 1))))] if rec else float("nan")
lines = ["## Chaos soak (`ringmaster run`, random worker kills)", "",
         f"`bench/chaos/run.sh {jobs} {seed} {maxk}`: {jobs} jobs of bench/chaos/job.yaml (2 workers, {steps} "
         f"steps, checkpoints every 10, epoch boundaries at 117/234) one after another, each with 1–{maxk} "
         f"kills (`_exit(137)`) at random steps on random ranks; {secs} s in all on {ncpu} CPUs, load "
         f"average {load0} at the start, {load1} at the end; time limit {limit} s a job.", "",
         "| jobs | completed (all steps) | failed | stuck (time limit) | kills | restarts | "
         "recovery p50 | p99 | max |", "|---|---|---|---|---|---|---|---|---|",
         f"| {len(rows)} | {len(done)} | {len(other)} | {len(stuck)} | {kills} | {restarts} | "
         f"{pct(50):.2f} s | {pct(99):.2f} s | {(rec[-1] if rec else float('nan')):.2f} s |", ""]
if mism:
    lines.append(f"{len(mism)} completed jobs counted restarts different from their kills: "
                 + ", ".join(f"job {r[0]} ({r[4]} kills, {r[5]} restarts)" for r in mism[:10])
                 + " (runner and worker logs kept in bench/results/raw/chaos-job-N-restarts*.txt)")
for r in other + stuck:
    lines.append(f"- job {r[0]}: {r[2]}, steps {r[3]}, exit {r[1]}, faults `{r[7].strip()}` "
                 f"(runner log kept in bench/results/raw/chaos-job-{r[0]}-{r[2]}.txt)")
lines.append("Recovery = the runner's measure, failure detected → the re-formed group's first report.")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
[ -z "$(awk '$3 != "Succeeded"' "$work/jobs.txt")" ]
