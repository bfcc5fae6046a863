#!/usr/bin/env bash
# bench/builds/compare.sh — the same benchmarks on two builds of ringmaster in one run, interleaved
# (A B A B ...), so a restructuring can show it cost nothing: training throughput of the Fashion-
# MNIST example (1 and 2 local workers, 2 epochs, samples/s and the final test accuracy) and the
# ring allreduce (2 ranks, in-place busbw at 1 KiB, 1 MiB and 64 MiB, from the bench table).
# Usage: BASE_BIN=/path/to/old/bin [NEW_BIN=bin/] [ROUNDS=3] bench/builds/compare.sh
# (BASE_BIN: build an earlier commit in a worktree: git worktree add /tmp/base <rev> && make -C
# /tmp/base). Writes bench/results/builds.md (OUT=... to change); without BASE_BIN it says so and
# leaves the last result in place. Each configuration keeps its median over the rounds.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
NEW_BIN=${NEW_BIN:-$root/bin}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$root/bench/results/builds.md}
if [ -z "${BASE_BIN:-}" ]; then
  echo "bench/builds: BASE_BIN not set (an earlier build to compare with); $OUT left as it is"
  exit 0
fi
for b in "$BASE_BIN" "$NEW_BIN"; do
  [ -x "$b/ringmaster" ] && [ -x "$b/ringmaster-worker" ] || { echo "no ringmaster binaries in $b" >&2; exit 1; }
done
T=$(mktemp -d /tmp/rm-bench-builds.XXXXXX)
trap 'rm -rf "$T"' EXIT
py=/usr/bin/python3
train() {   # bin replicas -> "samples_per_s accuracy"
  rm -rf "$T/ck" "$T/run"
  "$1/ringmaster" run -f "$root/deploy/examples/fashion-mnist.yaml" --replicas "$2" --epochs 2 \
    --checkpoint-dir "$T/ck" --run-dir "$T/run" -o json 2>/dev/null | tail -1 |
    $py -c 'import json,sys; r=json.load(sys.stdin)["status"]["result"]; print(r["samplesPerSecond"], r["testAccuracy"])'
}
allreduce() {   # bin -> "busbw_1K busbw_1M busbw_64M" (in-place, GB/s)
  rm -rf "$T/ck" "$T/run"
  "$1/ringmaster" run -f "$root/deploy/examples/allreduce-bench.yaml" --replicas 2 \
    --checkpoint-dir "$T/ck" --run-dir "$T/run" 2>/dev/null |
    awk '$1 == 1024 || $1 == 1048576 || $1 == 67108864 { printf "%s ", $12 } END { print "" }'
}
: > "$T/raw"
for r in $(seq "$ROUNDS"); do
  for tag in base new; do
    b=$BASE_BIN; [ $tag = new ] && b=$NEW_BIN
    for n in 1 2; do echo "$tag train$n $(train "$b" $n)" >> "$T/raw"; done
    echo "$tag allreduce $(allreduce "$b")" >> "$T/raw"
  done
done
base_rev=$(git -C "$BASE_BIN/.." rev-parse --short HEAD 2>/dev/null || echo "$BASE_BIN")
new_rev=$(git -C "$NEW_BIN/.." rev-parse --short HEAD 2>/dev/null || echo "$NEW_BIN")
$py - "$T/raw" "$OUT" "$base_rev" "$new_rev" "$ROUNDS" <<'PYEOF'
import sys, statistics, datetime, platform, os
raw, out, base_rev, new_rev, rounds = sys.argv[1:]
rows = {}
for line in open(raw):
    p = line.split()
    if len(p) < 3:
        continue
    rows.setdefault((p[0], p[1]), []).append([float(x) for x in p[2:]])
def vals(tag, key, i):
    return [r[i] for r in rows.get((tag, key), []) if len(r) > i]
def med(tag, key, i):
    v = vals(tag, key, i)
    return statistics.median(v) if v else float("nan")
def rng(tag, key, i, fmt):
    v = vals(tag, key, i)
    return (fmt % min(v)) + "–" + (fmt % max(v)) if v else "-"
cpu = "unknown"
for l in open("/proc/cpuinfo"):
    if l.startswith("model name"):
        cpu = l.split(":", 1)[1].strip(); break
lines = ["## Before and after a restructuring (bench/builds/compare.sh)", "",
         f"Machine: {os.cpu_count()} CPUs ({cpu}); {datetime.date.today()}; command: "
         f"`BASE_BIN=... ROUNDS={rounds} bench/builds/compare.sh`; base `{base_rev}`, new `{new_rev}`; "
         "interleaved rounds, medians.", "",
         "| benchmark | base (median) | new (median) | new / base | base range | new range |",
         "|---|---:|---:|---:|---:|---:|"]
for key, label in (("train1", "train, 1 worker (samples/s)"), ("train2", "train, 2 workers (samples/s)")):
    a, b = med("base", key, 0), med("new", key, 0)
    lines.append(f"| {label} | {a:.0f} | {b:.0f} | {b / a:.3f} | {rng('base', key, 0, '%.0f')} | {rng('new', key, 0, '%.0f')} |")
    a, b = med("base", key, 1), med("new", key, 1)
    same = "yes" if vals("base", key, 1) and set(vals("base", key, 1)) == set(vals("new", key, 1)) else "NO"
    lines.append(f"| {label.split(' (')[0]}: test accuracy | {a:.4f} | {b:.4f} | identical in every round: {same} | | |")
for i, size in enumerate(("1 KiB", "1 MiB", "64 MiB")):
    a, b = med("base", "allreduce", i), med("new", "allreduce", i)
    lines.append(f"| allreduce 2 ranks {size}, in-place busbw (GB/s) | {a:.2f} | {b:.2f} | {b / a:.3f} | {rng('base', 'allreduce', i, '%.2f')} | {rng('new', 'allreduce', i, '%.2f')} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
echo "wrote $OUT"
