#!/usr/bin/env bash
# bench/shm/example-wall.sh — the second shared-memory target (docs/strategies.md#topology): the
# Fashion-MNIST example's wall time under `ringmaster run` with the shared-memory transport (the
# default on one host) vs the TCP ring (RINGMASTER_SHM=0, which the workers inherit from the runner),
# back to back and alternating (shm, ring, shm, ring, ...) so drifting machine load hits both alike.
# Prints one line per run (wall seconds of the whole `ringmaster run`, the job's status.result.seconds,
# test accuracy, the backend the workers logged) and the medians; writes the table to $OUT (default
# bench/results/shm-example.md).
# Usage: RM_BIN=bin [REPS=3] [SPEC=deploy/examples/fashion-mnist.yaml] [EPOCHS=n] bench/shm/example-wall.sh
# EPOCHS=n rewrites the spec's epochs (a short smoke run); extra arguments go to `ringmaster run`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN="${RM_BIN:-$root/bin}"
case $BIN in /*) ;; *) BIN="$PWD/$BIN" ;; esac
SPEC="${SPEC:-$root/deploy/examples/fashion-mnist.yaml}"
REPS="${REPS:-3}"
OUT="${OUT:-$root/bench/results/shm-example.md}"
PY=/usr/bin/python3
T=$(mktemp -d "${TMPDIR:-/tmp}/rm-shm-wall.XXXXXX"); trap 'rm -rf "$T"' EXIT
if [ -n "${EPOCHS:-}" ]; then
  sed -E "s/^(    epochs:) [0-9]+/\1 $EPOCHS/" "$SPEC" > "$T/spec.yaml"
  grep -q "^    epochs: $EPOCHS\$" "$T/spec.yaml" || { echo "EPOCHS: no 'epochs:' line in $SPEC" >&2; exit 2; }
  SPEC="$T/spec.yaml"
fi

one() {   # one MODE(shm|ring) I
  local mode=$1 i=$2 d="$T/$1-$2" t0 t1 rc=0
  mkdir -p "$d"
  t0=$(date +%s.%N)
  if [ "$mode" = ring ]; then
    RINGMASTER_SHM=0 "$BIN/ringmaster" run --checkpoint-dir "$d/ck" --run-dir "$d/run" -f "$SPEC" -o json "${@:3}" \
      > "$d/out" 2> "$d/err" || rc=$?
  else
    env -u RINGMASTER_SHM "$BIN/ringmaster" run --checkpoint-dir "$d/ck" --run-dir "$d/run" -f "$SPEC" -o json "${@:3}" \
      > "$d/out" 2> "$d/err" || rc=$?
  fi
  t1=$(date +%s.%N)
  local be
  be=$(cat "$d"/run/worker-*.log 2>/dev/null | grep -o 'backend=[a-z]*' | sort | uniq -c | tr -s ' ' | tr '\n' ',' || true)
  tail -n 1 "$d/out" 2>/dev/null | $PY -c '
import json, sys
mode, i, rc, t0, t1, be = sys.argv[1:7]
try:
    j = json.load(sys.stdin); r = j.get("status", {}).get("result", {}); ph = j.get("status", {}).get("phase", "?")
except Exception:
    r, ph = {}, "no-json"
print("%s %s wall=%.2f job_seconds=%s acc=%s phase=%s rc=%s backends=[%s]" % (mode, i, float(t1) - float(t0),
      r.get("seconds", "?"), r.get("testAccuracy", "?"), ph, rc, be.strip(",")))
' "$mode" "$i" "$rc" "$t0" "$t1" "$be" | tee -a "$T/lines"
  [ "$rc" = 0 ] || { echo "--- $mode $i failed (rc $rc):" >&2; tail -n 5 "$d/err" >&2; }
  rm -rf "$d/ck"
}

{
  echo "# Fashion-MNIST example under \`ringmaster run\`: shm vs TCP ring (bench/shm/example-wall.sh)"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%M:%SZ)."
  echo "Spec: ${SPEC#$root/}${EPOCHS:+ (epochs $EPOCHS)}, extra args: ${*:-none}, $REPS alternating pairs. Load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo '```'
} > "$T/report"
for i in $(seq 1 "$REPS"); do
  one shm "$i" "$@"
  one ring "$i" "$@"
done
$PY - "$T/lines" <<'PY' | tee "$T/summary"
import re, statistics, sys
w = {"shm": [], "ring": []}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) \d+ wall=([\d.]+) .* rc=0 ", line)
    if m: w[m.group(1)].append(float(m.group(2)))
if w["shm"] and w["ring"]:
    s, r = statistics.median(w["shm"]), statistics.median(w["ring"])
    print("median wall: shm %.2f s, ring %.2f s: shm %.1f%% shorter (target >= 15%%)" % (s, r, 100 * (1 - s / r)))
else:
    print("not enough successful runs to compare")
PY
{ cat "$T/lines" "$T/summary"; echo '```'; echo; echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)."; } >> "$T/report"
mkdir -p "$(dirname "$OUT")"
cp "$T/report" "$OUT"
