#!/usr/bin/env bash
# bench/sweep/run.sh — hyperparameter parallelism with `ringmaster run -f sweep.yaml`:
#  1. wall time of the 12-trial example sweep (deploy/examples/lr-sweep.yaml: 4 learning rates x 3
#     hidden widths, 1-worker trials) run exhaustively (early stopping off) with parallelTrials
#     1, 2 and 4;
#  2. the same sweep with median early stopping: trial-epochs run (the sum over trials of the epochs
#     each one trained) against the exhaustive run's, the fraction saved, and whether the best
#     trial is the same one.
# Writes a markdown report to OUT (default bench/results/sweep.md) and the raw -o json outputs to
# RAW (a temp dir, removed unless RAW is given). RM_BIN (default ./bin) must hold ringmaster and
# ringmaster-worker. Knobs: PARALLEL="1 2 4" (exhaustive runs), STOP_PARALLEL=1 (the early-stopping
# comparison; 1 makes it deterministic: every trial sees the same finished set whatever the load),
# EPOCHS=5 (the example's), TRIALS=12 (the first N grid points). SMOKE=1: EPOCHS=2, PARALLEL="2 4",
# TRIALS=6 — seconds-to-minutes, for checking the script, not for numbers.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN="${RM_BIN:-$root/bin}"
OUT="${OUT:-$root/bench/results/sweep.md}"
py=/usr/bin/python3
SMOKE="${SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
  : "${EPOCHS:=2}" "${PARALLEL:=2 4}" "${TRIALS:=6}"
fi
EPOCHS="${EPOCHS:-5}"; PARALLEL="${PARALLEL:-1 2 4}"; TRIALS="${TRIALS:-12}"
STOP_PARALLEL="${STOP_PARALLEL:-1}"
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-sweep-bench.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
trap '[ "$keep_raw" = 1 ] || rm -rf "$RAW"' EXIT
[ -x "$BIN/ringmaster" ] || { echo "no $BIN/ringmaster: build first (make)"; exit 1; }

# sweep_file PARALLEL EARLY(0|1) > file: the example with these knobs
sweep_file() {
  $py - "$root/deploy/examples/lr-sweep.yaml" "$1" "$2" "$EPOCHS" "$TRIALS" <<'PY'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
p, early, epochs, trials = int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
s = d["spec"]
s["parallelTrials"] = p
s["maxTrials"] = trials
s["trialTemplate"]["training"]["epochs"] = epochs
if not early:
    s.pop("earlyStopping", None)
print(yaml.safe_dump(d, sort_keys=False))
PY
}

run_one() {  # run_one TAG PARALLEL EARLY
  local tag=$1
  sweep_file "$2" "$3" > "$RAW/$tag.yaml"
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN/ringmaster" run -f "$RAW/$tag.yaml" -o json --run-dir "$RAW/run-$tag" \
      --checkpoint-dir "$RAW/ck-$tag" > "$RAW/$tag.json" 2> "$RAW/$tag.err" || {
    echo "run $tag failed:"; tail -20 "$RAW/$tag.err"; exit 1; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" > "$RAW/$tag.time"
  echo "  $tag: $($py -c "print(round($t1-$t0,1))") s"
}

echo "sweep benchmark: $TRIALS trials x $EPOCHS epochs, exhaustive with parallelTrials $PARALLEL; median stopping at parallelTrials $STOP_PARALLEL"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for p in $PARALLEL; do run_one "exh-p$p" "$p" 0; done
# the exhaustive reference for the stopping comparison is the run at the same parallelism
case " $PARALLEL " in *" $STOP_PARALLEL "*) ;; *) run_one "exh-p$STOP_PARALLEL" "$STOP_PARALLEL" 0 ;; esac
run_one "med-p$STOP_PARALLEL" "$STOP_PARALLEL" 1
load1=$(cut -d' ' -f1-3 /proc/loadavg)

$py - "$RAW" "$OUT" "$PARALLEL" "$STOP_PARALLEL" "$TRIALS" "$EPOCHS" "$load0" "$load1" <<'PY'
import json, os, sys, datetime, platform
raw, out, par, sp, trials, epochs, l0, l1 = sys.argv[1:9]
def load(tag):
    j = json.loads(open(os.path.join(raw, tag + ".json")).read().strip().splitlines()[-1])
    t0, t1 = map(float, open(os.path.join(raw, tag + ".time")).read().split())
    st = j["status"]
    ep = sum(r["epoch"] for r in st["trialStatuses"])
    return {"wall": t1 - t0, "epochs": ep, "best": st["best"]["trial"] if "best" in st else None,
            "obj": st.get("best", {}).get("objective"), "t": st["trials"]}
lines = []
lines.append(f"Machine: {platform.node()}, {os.cpu_count()} cores; date {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
             f"load average before/after: {l0} / {l1}.")
lines.append(f"Sweep: deploy/examples/lr-sweep.yaml, first {trials} grid points, {epochs} epochs per trial, 1 worker per trial.")
lines.append("")
lines.append("| parallelTrials | wall time (s) | trials succeeded | best trial | best testAccuracy |")
lines.append("|---:|---:|---:|---|---:|")
base = None
for p in par.split():
    r = load(f"exh-p{p}")
    base = base or r["wall"]
    lines.append(f"| {p} | {r['wall']:.1f} | {r['t']['succeeded']}/{r['t']['total']} | {r['best']} | {r['obj']:.4f} |")
e, m = load(f"exh-p{sp}"), load(f"med-p{sp}")
saved = 1 - m["epochs"] / e["epochs"] if e["epochs"] else 0
lines.append("")
lines.append(f"Median early stopping (parallelTrials {sp}): {m['epochs']} trial-epochs against {e['epochs']} exhaustive "
             f"({saved:.0%} saved), {m['t']['stopped']} trials stopped, wall {m['wall']:.1f} s against {e['wall']:.1f} s; "
             f"best trial {m['best']} ({m['obj']:.4f}) against {e['best']} ({e['obj']:.4f}) exhaustive: "
             f"{'same' if m['best'] == e['best'] else 'DIFFERENT'}.")
text = "\n".join(lines) + "\n"
os.makedirs(os.path.dirname(out), exist_ok=True)
open(out, "w").write(text)
print(text)
PY
echo "report: $OUT"
