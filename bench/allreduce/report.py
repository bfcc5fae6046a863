#!/usr/bin/python3
"""Turns the raw outputs of bench/allreduce/run.sh into bench/results/allreduce.md.
Usage: report.py RAWDIR OUT.md [ARGS-OF-RUN]"""
import os
import re
import sys

raw, out = sys.argv[1], sys.argv[2]


def read(name):
    p = os.path.join(raw, name)
    return open(p).read() if os.path.exists(p) else ""


def rows(name, gloo=False):
    """size -> (busbw in-place, busbw out-of-place or None, wrong) from an nccl-tests style table."""
    res = {}
    for line in read(name).splitlines():
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        try:
            if gloo and len(f) >= 9:
                row = (float(f[7]), None, int(f[8]))
            elif len(f) >= 13:
                row = (float(f[11]), float(f[7]), int(f[8]) + int(f[12]))
            else:
                continue
            size = int(f[0])
            if size in res:   # several rounds: best busbw of the rounds, wrong values summed
                old = res[size]
                row = (max(old[0], row[0]), None if row[1] is None else max(old[1] or 0, row[1]),
                       old[2] + row[2])
            res[size] = row
        except ValueError:
            pass
    return res


meta = dict(l.split("=", 1) for l in read("meta").splitlines() if "=" in l)
lb = {}
for line in read("loopback.txt").splitlines():
    m = re.match(r"(\S+) chunk=\S+ bytes=\d+ seconds=\S+ GBps=(\S+)", line)
    if m:
        lb[m.group(1)] = max(lb.get(m.group(1), 0.0), float(m.group(2)))
single, duplex = lb.get("single"), lb.get("duplex")


def human(b):
    for unit, d in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= d and b % d == 0:
            return "%d %s" % (b // d, unit)
    return "%d B" % b


def fmt(x):
    return "—" if x is None else "%.2f" % x


def ratio(a, b):
    return "—" if a is None or not b else "%.2f×" % (a / b)


L = []
L.append("# Allreduce benchmark: ringmaster ring vs PyTorch Gloo vs Open MPI")
L.append("")
L.append("Measured by `bench/allreduce/run.sh` in one run, side by side, on one machine: %s cores, %s, "
         "kernel %s, %s. torch %s, %s." % (meta.get("nproc", "?"), meta.get("cpu", "?"), meta.get("kernel", "?"),
                                          meta.get("date", "?"), meta.get("torch", "?"), meta.get("mpi", "?")))
L.append("Load average at start %s, at end %s — the machine is shared with other builds and tests, so "
         "numbers are noisy (expect ±30%% run to run)." % (meta.get("load_start", "?"), meta.get("load_end", "?")))
L.append("")
L.append("Command: `RM_BIN=bin bench/allreduce/run.sh %s` (float32, sum; busbw = algbw × 2(n−1)/n, GB = 1e9 B; "
         "ring and MPI through `ringmaster-worker bench`, Gloo through `bench/allreduce/gloo_peer.py` "
         "(torch.distributed.all_reduce, in place); sizes < 4 MiB: 50 iterations after 5 warm-up, "
         "≥ 4 MiB: 5 after 1; time averaged over ranks; #wrong checked on every row). Every configuration "
         "ran in %s interleaved rounds; each cell is the best round (the loopback limit too), so a burst of "
         "load from other jobs hits every peer alike." % (sys.argv[3] if len(sys.argv) > 3 else "",
                                                         meta.get("rounds", "1")))
L.append("")
L.append("**Physical limit** (`bench/allreduce/loopback.c`, plain blocking TCP over 127.0.0.1, 4 MiB socket "
         "buffers, 1 MiB writes): single stream **%s GB/s**; two streams at once, one each way (what a 2-rank "
         "ring does: every rank sends and receives at the same time) **%s GB/s** per direction. "
         "A ring rank sends and receives 2(n−1)/n·S while busbw counts 2(n−1)/n·S per time, so with one rank per "
         "core the TCP copy limit on busbw is the duplex rate; with more ranks than cores (4 ranks here) every core "
         "copies for n/cores ranks and the limit is duplex × cores/n. The single-stream rate is not reachable by "
         "any allreduce on this machine: it leaves one core for each direction, a ring rank needs both directions "
         "on its own core." % (fmt(single), fmt(duplex)))
L.append("")
summary = []
for n in (2, 4):
    ring = rows("ring.%d" % n)
    if not ring:
        continue
    gloo = rows("gloo.%d" % n, gloo=True)
    tcp = rows("mpitcp.%d" % n)
    sm = rows("mpism.%d" % n)
    L.append("## %d ranks" % n)
    L.append("")
    cores = int(meta.get("nproc", "2") or 2)
    limit = duplex * min(1.0, cores / n) if duplex else None
    L.append("TCP copy limit for %d ranks on %d cores: %s GB/s busbw." % (n, cores, fmt(limit)))
    L.append("")
    L.append("| size | ring busbw in-place | ring out-of-place | Gloo | Open MPI TCP | Open MPI sm | ring ÷ Gloo | ring ÷ MPI TCP | ring ÷ loopback single | ring ÷ TCP copy limit | #wrong (ring) |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(ring):
        ri, ro, rw = ring[size]
        g = gloo.get(size, (None,))[0]
        t = tcp.get(size, (None,))[0]
        s = sm.get(size, (None,))[0]
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            human(size), fmt(ri), fmt(ro), fmt(g), fmt(t), fmt(s), ratio(ri, g), ratio(ri, t),
            ratio(ri, single), ratio(ri, limit), rw))
    big = [sz for sz in ring if sz >= 16 << 20]
    if big:
        rbest = [ring[sz][0] for sz in big]
        gb = [gloo[sz][0] for sz in big if sz in gloo]
        mean = lambda v: sum(v) / len(v) if v else None
        summary.append((n, mean(rbest), mean(gb), mean([tcp[sz][0] for sz in big if sz in tcp]),
                        mean([sm[sz][0] for sz in big if sz in sm]), limit))
    L.append("")
if summary:
    L.append("## Summary at ≥ 16 MiB (mean busbw over 16, 64, 256 MiB, GB/s)")
    L.append("")
    L.append("| ranks | ring | Gloo | Open MPI TCP | Open MPI sm | ring ÷ Gloo (target ≥ 1.5×) | ring ÷ loopback single stream (target ≥ 0.9) | ring ÷ TCP copy limit |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r, g, t, sm_, lim in summary:
        L.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (n, fmt(r), fmt(g), fmt(t), fmt(sm_), ratio(r, g),
                                                              ratio(r, single), ratio(r, lim)))
    L.append("")
fus = read("fusion.2")
if fus:
    L.append("## Tensor fusion (2 ranks, ring)")
    L.append("")
    L.append("`ringmaster-worker bench --fusion` (model size in the header line: by default 200 layers × 10,000 floats, 8 MB of gradients); "
             "backward is simulated as 20 µs of busy work per layer in reverse order, each layer marked ready "
             "as it finishes; buckets are reduced on the comm thread while backward continues. Threshold 0 = one "
             "allreduce per layer; 64 MiB = one allreduce after backward (no overlap). step = backward + the "
             "exposed (waited-for) communication.")
    L.append("")
    L.append("```")
    L.extend(l for l in fus.splitlines() if l.strip())
    L.append("```")
    L.append("")
    frows = []
    for line in fus.splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            frows.append((int(f[0]), int(f[1]), float(f[2])))
    if frows:
        per_layer = [r for r in frows if r[0] == 0]
        best = min(frows, key=lambda r: r[2])
        if per_layer:
            L.append("Per-layer allreduce: %.2f ms/step; best fused (threshold %s, %d buckets): %.2f ms/step — "
                     "%.2f× faster." % (per_layer[0][2], human(best[0]) if best[0] else "0", best[1], best[2],
                                        per_layer[0][2] / best[2]))
            L.append("")
            L.append("Reading the table: with 200 buckets the step pays ~200 small-message latencies (comm time per "
                     "step far above bytes ÷ busbw); fusing cuts the message count. Here 2 ranks share 2 cores, so "
                     "the simulated backward and the comm thread compete for the same CPUs and overlap can hide only "
                     "part of the communication (exposed < comm).")
            L.append("")
L.append("## Notes")
L.append("")
L.append("- Ring design (worker/comm/comm_ring.c): scatter-reduce then all-gather, segments cut into 512 KiB pieces "
         "pipelined across steps, non-blocking sendmsg/recvmsg + poll on one thread, all-gather received "
         "straight into the destination, scatter-reduce into a scratch piece then a vectorised add; 2 ranks "
         "≤ 64 KiB use one exchange (half the latency). With ≥ 4 CPUs a sender thread sends ≥ 1 MiB "
         "collectives while the caller receives and reduces (on this 2-core machine both variants measured "
         "the same within noise, so it is off here).")
L.append("- Gloo is run in place only (torch.distributed.all_reduce), so ratios use the ring's in-place column.")
L.append("- Open MPI runs `ringmaster-worker bench --backend mpi` (MPI_Allreduce) under mpirun with "
         "`--mca btl tcp,self` or `--mca btl vader,self` (shared memory, single-copy mechanism off), loopback only.")
L.append("- Numbers move ±30% between runs on this shared machine; rerun with ROUNDS=3 for steadier cells.")
L.append("")
open(out, "w").write("\n".join(L) + "\n")
