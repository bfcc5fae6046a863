#!/usr/bin/python3
"""bench/shard/report.py RAW OUT: the markdown report of bench/shard/run.sh from its raw folder
(busbw tables per collective and world, the step-time/memory table per stage and world)."""
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
L.append("## Sharding: reduce-scatter / all-gather busbw, ZeRO stages\n")
L.append("`bench/shard/run.sh` (%s), %s, %s CPUs (%s), load %s at start, %s at end; torch %s; %s." % (
    "QUICK=1 smoke run" if meta.get("quick") == "1" else "run", meta.get("date"), meta.get("nproc"),
    meta.get("cpu"), meta.get("load_start"), meta.get("load_end"), meta.get("torch"), meta.get("mpi")))
L.append("Measured on a machine shared with other jobs (see the load): treat absolute numbers as a smoke test.\n")
worlds = sorted({int(p.rsplit(".", 1)[1]) for p in glob.glob(os.path.join(raw, "ring.*.*")) if not p.endswith(".err")})
tworlds = sorted({int(os.path.basename(p).split(".")[2]) for p in glob.glob(os.path.join(raw, "train.*.*.r0.log"))})
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
train_at = len(L)   # the stage table and its notes: dropped when no stage ran (TRAIN=0)
L.append("\n**Step time and memory per rank, MLP hidden %s, Adam, batch 64/worker, %s steps**\n" % (
    meta.get("hidden"), meta.get("steps")))
L.append("| workers | sharding | step (s) | params MB | grads MB | optimizer MB | peak RSS MB | RSS after last step MB | result |")
L.append("|---:|---|---:|---:|---:|---:|---:|---:|---|")
for n in tworlds:
    for st in ("none", "optimizer", "gradients", "full"):
        logs = sorted(glob.glob(os.path.join(raw, "train.%s.%d.r*.log" % (st, n))))
        if not logs:
            continue
        mem, rss, now, step, ok = None, 0.0, 0.0, None, True
        for f in logs:
            s = open(f).read()
            m = re.search(r'msg="?memory"? .*?params_bytes=(\d+) grads_bytes=(\d+) optimizer_bytes=(\d+) activations_bytes=(\d+) peak_rss_bytes=(\d+)(?: rss_bytes=(\d+))?', s)
            d = re.search(r'msg="training done" steps=(\d+) .*?seconds=([\d.]+)', s)
            if not m or not d:
                ok = False
                continue
            rss = max(rss, float(m.group(5)))
            if m.group(6):
                now = max(now, float(m.group(6)))
            if f.endswith("r0.log"):
                mem = [int(m.group(i)) for i in range(1, 5)]
                step = float(d.group(2)) / max(1, int(d.group(1)))
        mb = lambda b: "%.1f" % (b / 1e6)
        L.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (n, st, "%.2f" % step if step else "–",
                 mb(mem[0]) if mem else "–", mb(mem[1]) if mem else "–", mb(mem[2]) if mem else "–",
                 mb(rss) if rss else "–", mb(now) if now else "–", "ok" if ok else "FAILED"))
L.append("""
What the columns are: params/grads/optimizer are what the rank holds at the peak of a step as the
strategy accounts it (`ringmaster_worker_memory_bytes{kind}`), peak RSS is the process's
`ru_maxrss` and the other its resident set right after the last step (both the largest rank's; both include
the Fashion-MNIST arrays, ~220 MB). Start-up allocates and zeroes the full-size model buffers and
initialises the parameters whole on every rank, so the high-water mark is set before sharding
applies; the resident set after the last step shows what a rank keeps. `optimizer` holds each rank's
shard of Adam's two buffers from stage 1 on; from `gradients` on a rank holds only its gradient shard
plus two staging buckets (<= 2 MiB each: backward computes each layer's gradient bucket by bucket and
each bucket is reduce-scattered into the shard while the next is computed); `full` keeps only its
parameter pieces resident and gathers each layer into one of two unit buffers (the layer computing
and the next, prefetched), so params are the pieces plus the two largest layers' worth.
Step time includes the first step and the round setup (few steps: an upper bound); the workers'
`step phases` log line splits the steady step into forward/backward/update/gather.
PyTorch FSDP on CPU/Gloo and a PyTorch DDP anchor were not run here.""")
if not tworlds:
    del L[train_at:]
open(out, "w").write("\n".join(L) + "\n")
