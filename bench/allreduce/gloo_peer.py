#!/usr/bin/python3
"""The PyTorch Gloo peer for the allreduce benchmark: torch.distributed.all_reduce (in place,
SUM, float32, CPU) timed like `ringmaster-worker bench`: per size, warm-up, a timed loop of -n
iterations averaged over the ranks, then a checked run on data whose sum is exact (#wrong).
Rank 0 prints nccl-tests-style rows: size count type redop root time(us) algbw busbw #wrong.

Usage: gloo_peer.py --rank R --world N --init file:///tmp/x [-b 1K -e 256M -f 4 -n 20 -w 5]
Runs on Debian's /usr/bin/python3 (python3-torch 1.13)."""
import argparse
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mul = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    s = s.strip().upper().rstrip("B")
    if s and s[-1] in mul:
        return int(float(s[:-1]) * mul[s[-1]])
    return int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True, help="file:///path or tcp://127.0.0.1:PORT")
    ap.add_argument("-b", default="1K")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", type=float, default=2)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world)
    n = a.world
    busf = 2.0 * (n - 1) / n if n > 1 else 0.0
    if a.rank == 0:
        print("# torch %s gloo allreduce, %d ranks, %d iters, %d warmup (in place)" % (torch.__version__, n, a.n, a.w))
        print("#%12s%14s%10s%8s%8s%11s%8s%8s%7s" % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"))
    size, maxb = parse_size(a.b), parse_size(a.e)
    total = 0.0
    rows = 0
    while size <= maxb:
        count = size // 4
        t = torch.full((count,), float(a.rank + 1), dtype=torch.float32)
        for _ in range(a.w):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            dist.all_reduce(t)
        dt = (time.perf_counter() - t0) / a.n
        tt = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(tt)
        dt = tt.item() / n
        t.fill_(float(a.rank + 1))
        dist.all_reduce(t)
        wrong = int((t != float(n * (n + 1) // 2)).sum().item())
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(w)
        algbw = count * 4 / dt / 1e9
        if a.rank == 0:
            print(" %12d%14d%10s%8s%8d%11.2f%8.2f%8.2f%7d" % (count * 4, count, "float", "sum", -1, dt * 1e6, algbw, algbw * busf, int(w.item())), flush=True)
        total += algbw * busf
        rows += 1
        nxt = int(size * a.f)
        size = nxt if nxt > size else size + 4
    if a.rank == 0:
        print("# Avg bus bandwidth    : %.4f" % (total / max(rows, 1)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
