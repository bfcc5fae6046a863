#!/usr/bin/python3
"""torch_ddp.py — the PyTorch 1.13 peer for bench/train: the same MLP (784-512-256-10, ReLU,
softmax cross-entropy), per-worker batch, optimizer (SGD momentum 0.9, lr 0.02 per 64 samples scaled
by global batch/64, linear warmup over 1 epoch, then cosine) and data order rule (per-epoch
permutation, rank r takes positions r, r+n, ... of each global batch), trained with
DistributedDataParallel over Gloo on CPU, one process per worker, one intra-op thread each.

Two data paths (--loader):
  fast        whole uint8 tensors in memory, index + scale per batch (no DataLoader): measures the
              training step itself — the strongest PyTorch baseline;
  dataloader  the idiomatic script: a Dataset whose __getitem__ returns one (float image / 255,
              label) pair like torchvision's ToTensor, a DistributedSampler and a DataLoader with
              batch 64 (num_workers 0: one core per worker, like ringmaster).

Prints one JSON line per rank 0 with samples/s per worker (steady state: steps after the first
50), per-epoch test accuracy with elapsed seconds, and the time to reach --target accuracy.

usage: torch_ddp.py --world N [--epochs E] [--batch B] [--max-seconds S] [--target 0.88]
"""
import argparse, gzip, json, math, os, struct, sys, time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        r, c = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, r * c)
    return np.frombuffer(raw, dtype=np.uint8, offset=8)


def lr_at(epoch_pos, base, global_batch, warmup, epochs):
    peak = base * global_batch / 64.0
    if warmup > 0 and epoch_pos < warmup:
        return base + (peak - base) * epoch_pos / warmup
    p = min(1.0, (epoch_pos - warmup) / max(1e-9, epochs - warmup))
    return peak * 0.5 * (1 + math.cos(math.pi * p))


def worker(rank, a, port, out_q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    xtr = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").copy())
    ytr = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = torch.from_numpy(idx(f"{DATA}/t10k-images-idx3-ubyte.gz").copy()).float().div_(255.0)
    yte = torch.from_numpy(idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    B, W = a.batch, a.world
    G = B * W
    n = xtr.shape[0]
    steps_per_epoch = n // G
    g = torch.Generator()
    loader = None
    if a.loader == "dataloader":
        class Items(torch.utils.data.Dataset):
            def __len__(self):
                return n
            def __getitem__(self, i):
                return xtr[i].float().div(255.0), ytr[i]
        sampler = torch.utils.data.distributed.DistributedSampler(Items(), num_replicas=W, rank=rank,
                                                                  shuffle=True, seed=42,
                                                                  drop_last=True)
        loader = torch.utils.data.DataLoader(Items(), batch_size=B, sampler=sampler, drop_last=True)
    t0 = time.time()
    evals, reached, step = [], None, 0
    t_steady, s_steady = None, 0
    done = False
    for epoch in range(a.epochs):
        g.manual_seed(42 * 1000 + epoch)
        perm = torch.randperm(n, generator=g)
        ddp.train()
        it = None
        if loader is not None:
            loader.sampler.set_epoch(epoch)
            it = iter(loader)
        for s in range(steps_per_epoch):
            pos = s * G
            if it is not None:
                x, y = next(it)
            else:
                ids = perm[pos + rank: pos + G: W]
                x = xtr[ids].float().div_(255.0)
                y = ytr[ids]
            for pg in opt.param_groups:
                pg["lr"] = lr_at(epoch + pos / n, a.lr, G, a.warmup, a.epochs)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step == 50:
                t_steady = time.time()
            elif step > 50:
                s_steady += B
            if a.max_seconds and time.time() - t0 > a.max_seconds:
                done = True
                break
        # sharded evaluation, reduced (as ringmaster does)
        model.eval()
        per = (xte.shape[0] + W - 1) // W
        lo, hi = rank * per, min(xte.shape[0], (rank + 1) * per)
        with torch.no_grad():
            correct = (model(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum().float()
        dist.all_reduce(correct)
        acc = correct.item() / xte.shape[0]
        el = time.time() - t0
        evals.append({"epoch": epoch + 1, "seconds": round(el, 2), "test_accuracy": round(acc, 4),
                      "partial": done})
        if reached is None and acc >= a.target:
            reached = el
            if a.stop_at_target:
                break
        if done:
            break
    rate = s_steady / (time.time() - t_steady) if t_steady and s_steady else 0.0
    if rank == 0:
        out_q.put({"peer": "pytorch-ddp-gloo", "loader": a.loader, "torch": torch.__version__, "world": W, "batch": B,
                   "samples_per_s_per_worker": round(rate, 1), "steps": step,
                   "time_to_target_s": reached, "target": a.target, "evals": evals})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--target", type=float, default=0.88)
    p.add_argument("--max-seconds", type=float, default=0)
    p.add_argument("--stop-at-target", action="store_true")
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--loader", choices=["fast", "dataloader"], default="fast")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, q)) for r in range(a.world)]
    for pr in procs:
        pr.start()
    res = q.get()
    for pr in procs:
        pr.join()
    print(json.dumps(res))
    sys.exit(0 if all(pr.exitcode == 0 for pr in procs) else 1)


if __name__ == "__main__":
    main()
