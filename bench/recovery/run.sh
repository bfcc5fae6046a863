#!/usr/bin/env bash
# bench/recovery/run.sh — recovery time of `ringmaster run`: a worker dies (RINGMASTER_FAULT
# exit, i.e. _exit(137) mid-training) and we measure until the group trains again = the first
# step of the new rendezvous epoch completes. >= 10 failures each at 2 and 4 workers, cycling
# through the ranks. Timestamps come from the workers' own log lines (ms resolution): the dying
# worker logs "fault injected" right before _exit; every survivor logs "recovered" right after
# its first step in the new epoch. Also reported: the controller's own measurement
# (ringmaster_recovery_seconds: failure detected -> new round closed and its first report).
# Usage: bench/recovery/run.sh [FAILURES=12] [WORLDS="2 4"]   (needs bin/ built; ~1 min)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
nfail="${1:-12}"
worlds="${2:-2 4}"
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-recovery.XXXXXX")
trap 'rm -rf "$work"' EXIT
for w in $worlds; do
  faults=""
  for i in $(seq 0 $((nfail - 1))); do
    faults="${faults:+$faults;}exit:rank=$(( (i + 1) % w )):step=$(( 150 + 200 * i ))"
  done
  RINGMASTER_FAULT="$faults" "$bin/ringmaster" run -f "$root/bench/recovery/job.yaml" \
      --replicas "$w" --checkpoint-dir "$work/ck-$w" --run-dir "$work/run-$w" -o json \
      >"$work/out-$w.json" 2>"$work/err-$w.txt" || { tail -20 "$work/err-$w.txt" >&2; exit 1; }
  /usr/bin/python3 - "$work/run-$w" "$work/out-$w.json" "$w" "$work/err-$w.txt" <<'PY'
import datetime, glob, json, re, statistics, sys
run, out, w, errf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ts_re = re.compile(r'^ts=(\S+) ')
def ts(line):
    m = ts_re.match(line)
    return datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() if m else None
deaths, recovered = [], []
for f in glob.glob(run + "/worker-*.log"):
    for line in open(f, errors="replace"):
        t = ts(line)
        if t is None: continue
        if 'msg="fault injected"' in line: deaths.append(t)
        elif 'msg="recovered"' in line: recovered.append(t)
deaths.sort(); recovered.sort()
rec = []
for i, d in enumerate(deaths):
    nxt = deaths[i + 1] if i + 1 < len(deaths) else float("inf")
    after = [r for r in recovered if d < r < nxt]
    if after: rec.append(after[0] - d)
job = json.loads(open(out).read().strip().splitlines()[-1])
ctl = []
for line in open(errf, errors="replace"):
    m = re.search(r'recovery_seconds=([0-9.]+)', line)
    if m: ctl.append(float(m.group(1)))
st = job["status"]
print(json.dumps({"workers": w, "failures": len(deaths), "measured": len(rec),
    "restarts": st["restarts"], "phase": st["phase"], "testAccuracy": st["result"]["testAccuracy"],
    "median_s": round(statistics.median(rec), 3) if rec else None,
    "worst_s": round(max(rec), 3) if rec else None,
    "all_s": [round(x, 3) for x in rec],
    "controller_median_s": round(statistics.median(ctl), 3) if ctl else None,
    "controller_worst_s": round(max(ctl), 3) if ctl else None}))
PY
done
