#!/usr/bin/python3
"""The PyTorch Gloo peer for the sharding benchmark: torch.distributed.all_gather (and
reduce_scatter when this torch's Gloo backend has it; PyTorch 1.13's does not, which is reported
as a row "# gloo reduce_scatter: unsupported ...") timed like `ringmaster-worker bench --op`:
per size (the full vector), warm-up, a timed loop of -n iterations averaged over the ranks.
busbw = algbw * (n-1)/n. Rank 0 prints nccl-tests-style rows (size count type redop root
time algbw busbw #wrong; #wrong is not checked here: -1).

Usage: gloo_shard_peer.py --op all_gather|reduce_scatter --rank R --world N --init file:///tmp/x
       [-b 1K -e 256M -f 4 -n 20 -w 5]"""
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
    ap.add_argument("--op", required=True, choices=["all_gather", "reduce_scatter"])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("-b", default="1K")
    ap.add_argument("-e", default="64M")
    ap.add_argument("-f", type=float, default=4)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world)
    n = a.world
    busf = (n - 1) / n if n > 1 else 0.0
    if a.rank == 0:
        print("# torch %s gloo %s, %d ranks, %d iters, %d warmup" % (torch.__version__, a.op, n, a.n, a.w))
    size = parse_size(a.b)
    end = parse_size(a.e)
    while size <= end:
        per = max(1, size // 4 // n)   # elements per rank; the full vector is per * n
        full = per * n
        shard = torch.ones(per)
        outs = [torch.empty(per) for _ in range(n)]
        inputs = [torch.ones(per) for _ in range(n)]

        def once():
            if a.op == "all_gather":
                dist.all_gather(outs, shard)
            else:
                dist.reduce_scatter(shard, inputs)
        try:
            for _ in range(a.w):
                once()
        except RuntimeError as e:   # Gloo without reduce_scatter
            if a.rank == 0:
                print("# gloo %s: unsupported by this torch's Gloo backend (%s)" % (a.op, str(e).splitlines()[0][:120]))
            return
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.n):
            once()
        t = torch.tensor([(time.perf_counter() - t0) / a.n * 1e6])
        dist.all_reduce(t)
        us = t.item() / n
        algbw = full * 4 / (us * 1e-6) / 1e9 if us > 0 else 0
        if a.rank == 0:
            print(" %12d %12d %8s %6s %6d %10.2f %7.2f %7.2f %6d" % (full * 4, full, "float", "sum", -1, us, algbw, algbw * busf, -1), flush=True)
        size = int(size * a.f) if a.f > 1 else size + 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
