#!/usr/bin/env bash
# bench/shard/run.sh — issue 14: what sharding (ZeRO stages) costs and saves.
#  1. reduce_scatter and all_gather busbw (nccl-tests format, factor (n-1)/n) of ringmaster's ring
#     against Open MPI (TCP) and PyTorch Gloo (all_gather; reduce_scatter only if this torch's Gloo
#     has it — 1.13's does not, and the report says so), next to the ring allreduce, 2 and 4 ranks.
#  2. Step time and per-rank memory (the strategy's ringmaster_worker_memory_bytes kinds and the
#     peak RSS) for sharding none/optimizer/gradients/full on the wide MLP (hidden 4096,4096,4096,
#     Adam) at 2 and 4 workers (static world over loopback, a few steps each).
# Writes bench/results/shard.md (OUT=...), raw outputs in $RAW (default a temp dir, removed).
# QUICK=1: a smoke run (seconds to a minute: small sizes, hidden 1024x3, 2 workers, 3 steps).
# RM_BIN (default ./bin) must hold ringmaster-worker. Runs alone; never in parallel with others.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
W="${RM_BIN:-$root/bin}/ringmaster-worker"
OUT="${OUT:-$root/bench/results/shard.md}"
py=/usr/bin/python3
keep_raw=1
RAW="${RAW:-}"
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-shard.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ "$keep_raw" = 1 ] || rm -rf "$RAW"
}
trap cleanup EXIT
[ -x "$W" ] || { echo "no $W: build first (make)"; exit 1; }

QUICK="${QUICK:-0}"
if [ "$QUICK" = 1 ]; then
  SIZES=(-b 1K -e 4M -f 16 -n 3 -w 1); WORLDS=(2); HIDDEN=1024,1024,1024; STEPS=3
else
  SIZES=(-b 1K -e 256M -f 4 -n 5 -w 1); WORLDS=(2 4); HIDDEN=4096,4096,4096; STEPS=8
fi
STAGES=(none optimizer gradients full)

free_ports() {
  $py - "$1" <<'PY'
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in ss))
PY
}

ring() {   # ring N OUTFILE bench-args...
  local n=$1 out=$2; shift 2
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    timeout 600 "$W" bench --world "$n" --rank "$r" --peers "$peers" --timeout 60 "$@" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  timeout 600 "$W" bench --world "$n" --rank 0 --peers "$peers" --timeout 60 "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

mpi() {   # mpi N OUTFILE args...
  local n=$1 out=$2; shift 2
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_plm_rsh_agent=false \
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl tcp,self \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$W" bench --backend mpi "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
}

gloo() {   # gloo N OUTFILE args...
  local n=$1 out=$2; shift 2
  local store="$RAW/gloo-store.$RANDOM$RANDOM"
  pids=()
  for r in $(seq 1 $((n - 1))); do
    OMP_NUM_THREADS=1 timeout 600 $py "$root/bench/shard/gloo_shard_peer.py" --rank "$r" --world "$n" --init "file://$store" "$@" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  OMP_NUM_THREADS=1 timeout 600 $py "$root/bench/shard/gloo_shard_peer.py" --rank 0 --world "$n" --init "file://$store" "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
  rm -f "$store"
}

train() {   # train N STAGE OUTPREFIX: a static world of N workers, STEPS steps, logs per rank
  local n=$1 stage=$2 pre=$3
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    timeout 900 "$W" train --peers "$peers" --rank "$r" --sharding "$stage" --optimizer adam \
      --hidden "$HIDDEN" --batch 64 --max-steps "$STEPS" --metrics-addr off \
      --comm-timeout 120 > "$pre.r$r.log" 2>&1 &
    pids+=($!)
  done
  timeout 900 "$W" train --peers "$peers" --rank 0 --sharding "$stage" --optimizer adam \
    --hidden "$HIDDEN" --batch 64 --max-steps "$STEPS" --metrics-addr off \
    --comm-timeout 120 > "$pre.r0.log" 2>&1 || echo "FAILED rc=$?" >> "$pre.r0.log"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
}

{ echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "nproc=$(nproc)";
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')";
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)";
  echo "torch=$($py -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)";
  echo "mpi=$(mpirun --version 2>/dev/null | head -1 || echo none)";
  echo "quick=$QUICK"; echo "hidden=$HIDDEN"; echo "steps=$STEPS"; } > "$RAW/meta"
have_mpi=0; command -v mpirun >/dev/null 2>&1 && have_mpi=1
have_torch=0; $py -c 'import torch.distributed' 2>/dev/null && have_torch=1

for n in "${WORLDS[@]}"; do
  for op in allreduce reduce_scatter all_gather; do
    echo "== $n ranks: ring $op"
    ring "$n" "$RAW/ring.$op.$n" --op "$op" "${SIZES[@]}"
    if [ "$have_mpi" = 1 ]; then echo "== $n ranks: open mpi $op"; mpi "$n" "$RAW/mpi.$op.$n" --op "$op" "${SIZES[@]}"; fi
    if [ "$have_torch" = 1 ] && [ "$op" != allreduce ]; then
      echo "== $n ranks: gloo $op"; gloo "$n" "$RAW/gloo.$op.$n" --op "$op" "${SIZES[@]}"
    fi
  done
  for st in "${STAGES[@]}"; do
    echo "== $n workers: train sharding=$st"
    train "$n" "$st" "$RAW/train.$st.$n"
  done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$RAW/meta"
for f in "$RAW"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -3 "$f"; }; done || true

$py - "$RAW" "$OUT" <<'PY'
import glob, os, re, sys
raw, out = sys.argv[1], sys.argv[2]
meta = dict(l.strip().split("=", 1) for l in open(os.path.join(raw, "meta")) if "=" in l)
def rows(path):
    r = {}
    if not os.path.exists(path):
        return r, None
    note = None
    for l in open(path):
        if l.startswith("# gloo") and "unsupported" in l:
            note = l[2:].strip()
        m = re.match(r"^\s+(\d+)\s+(\d+)\s+float\s+sum\s+-1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", l)
        if m:
            r[int(m.group(1))] = float(m.group(5))   # out-of-place busbw
    return r, note
L = []
L.append("## Sharding: reduce-scatter / all-gather busbw, ZeRO stages (issue 14)\n")
L.append("`bench/shard/run.sh` (%s), %s, %s CPUs (%s), load %s at start, %s at end; torch %s; %s." % (
    "QUICK=1 smoke run" if meta.get("quick") == "1" else "full run", meta.get("date"), meta.get("nproc"),
    meta.get("cpu"), meta.get("load_start"), meta.get("load_end"), meta.get("torch"), meta.get("mpi")))
L.append("Measured on a machine shared with other jobs (see the load): treat absolute numbers as a smoke test.\n")
worlds = sorted({int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(raw, "ring.*.*")) if not p.endswith(".err")})
for n in worlds:
    for op in ("allreduce", "reduce_scatter", "all_gather"):
        ring, _ = rows(os.path.join(raw, "ring.%s.%d" % (op, n)))
        mpi, _ = rows(os.path.join(raw, "mpi.%s.%d" % (op, n)))
        gloo, gnote = rows(os.path.join(raw, "gloo.%s.%d" % (op, n)))
        L.append("\n**%s, %d ranks** — busbw GB/s (out of place; factor %s)\n" % (op, n, "2(n-1)/n" if op == "allreduce" else "(n-1)/n"))
        L.append("| size (B) | ring | Open MPI tcp | Gloo | ring / Gloo |")
        L.append("|---:|---:|---:|---:|---:|")
        for s in sorted(ring):
            # gloo sizes are per-rank multiples; match the nearest full size
            g = min(gloo.items(), key=lambda kv: abs(kv[0] - s))[1] if gloo else None
            L.append("| %d | %.2f | %s | %s | %s |" % (s, ring[s], "%.2f" % mpi[s] if s in mpi else "–",
                     "%.2f" % g if g is not None else "–", "%.2f×" % (ring[s] / g) if g else "–"))
        if gnote:
            L.append("\n%s" % gnote)
        elif op != "allreduce" and not gloo:
            L.append("\nGloo: not measured (torch not installed when this ran)." if meta.get("torch") == "none" else "\nGloo: no rows.")
L.append("\n**Step time and memory per rank, MLP hidden %s, Adam, batch 64/worker, %s steps**\n" % (
    meta.get("hidden"), meta.get("steps")))
L.append("| workers | sharding | step (s) | params MB | grads MB | optimizer MB | peak RSS MB (largest rank) | result |")
L.append("|---:|---|---:|---:|---:|---:|---:|---|")
for n in worlds:
    for st in ("none", "optimizer", "gradients", "full"):
        logs = sorted(glob.glob(os.path.join(raw, "train.%s.%d.r*.log" % (st, n))))
        if not logs:
            continue
        mem, rss, step, ok = None, 0.0, None, True
        for f in logs:
            s = open(f).read()
            m = re.search(r'msg="?memory"? .*?params_bytes=(\d+) grads_bytes=(\d+) optimizer_bytes=(\d+) activations_bytes=(\d+) peak_rss_bytes=(\d+)', s)
            d = re.search(r'msg="training done" steps=(\d+) .*?seconds=([\d.]+)', s)
            if not m or not d:
                ok = False
                continue
            rss = max(rss, float(m.group(5)))
            if f.endswith("r0.log"):
                mem = [int(m.group(i)) for i in range(1, 5)]
                step = float(d.group(2)) / max(1, int(d.group(1)))
        mb = lambda b: "%.1f" % (b / 1e6)
        L.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (n, st, "%.2f" % step if step else "–",
                 mb(mem[0]) if mem else "–", mb(mem[1]) if mem else "–", mb(mem[2]) if mem else "–",
                 mb(rss) if rss else "–", "ok" if ok else "FAILED"))
L.append("""
What the columns are: params/grads/optimizer are what the rank holds at the peak of a step as the
strategy accounts it (`ringmaster_worker_memory_bytes{kind}`), peak RSS is the process's
`ru_maxrss`. `optimizer` holds each rank's shard of Adam's two buffers from stage 1 on; `gradients`
still materialises every layer's gradient in the flat buffer before its reduce-scatter, so its grads
bytes equal none's in this version; `full` releases every layer's parameters and gradients outside
the rank's piece after use (madvise on host memory), so params and grads are the rank's pieces plus
one whole layer. Step time includes the first step and the round setup (few steps: an upper bound).
PyTorch FSDP on CPU/Gloo and a PyTorch DDP anchor were not run here.""")
open(out, "w").write("\n".join(L) + "\n")
PY
echo "wrote $OUT"
