#!/usr/bin/python3
"""ddp_fashion_mnist.py — the same job as deploy/examples/fashion-mnist.yaml, written the way a
PyTorch user would: DistributedDataParallel over Gloo, launched by torchrun (env:// rendezvous).

Same as ringmaster's worker: MLP 784-512-256-10 (ReLU), inputs scaled to [0,1], cross-entropy,
batch 64 per worker, SGD momentum 0.9, lr 0.02 per 64-sample batch scaled linearly by the global
batch (0.08 at 4 workers) with a 1-epoch linear warmup from 0.02 then cosine decay to 0 over the
remaining epochs (per step), 10 epochs, each rank a disjoint shard of a per-epoch permutation, test
accuracy evaluated after every epoch (sharded, summed with allreduce). Rank 0 prints one JSON line.

Run: python3 -m torch.distributed.run --nproc_per_node 4 --master_addr 127.0.0.1 \
        --master_port PORT bench/e2e/ddp_fashion_mnist.py [--epochs N]
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

T0 = time.time()
DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    dist.init_process_group("gloo")          # env://: MASTER_ADDR/PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    xtr = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0)
    ytr = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = torch.from_numpy(idx(f"{DATA}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0)
    yte = torch.from_numpy(idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)   # broadcasts rank 0's parameters
    G = a.batch * world
    peak = a.lr * G / 64
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = xtr.shape[0] // G
    warm = 1.0
    t_train = time.time()
    acc = 0.0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed + epoch)
        perm = torch.randperm(xtr.shape[0], generator=g)
        ddp.train()
        for s in range(steps_per_epoch):
            e = epoch + s / steps_per_epoch
            if e < warm:
                lr = a.lr + (peak - a.lr) * e / warm
            else:
                p = min(1.0, (e - warm) / (a.epochs - warm))
                lr = peak * 0.5 * (1 + math.cos(math.pi * p))
            for pg in opt.param_groups:
                pg["lr"] = lr
            ix = perm[s * G + rank * a.batch: s * G + (rank + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xtr[ix]), ytr[ix])
            loss.backward()
            opt.step()
        ddp.eval()
        with torch.no_grad():
            n = xte.shape[0]
            lo, hi = rank * n // world, (rank + 1) * n // world
            correct = torch.tensor([(model(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum().item()], dtype=torch.float64)
            dist.all_reduce(correct)
            acc = correct.item() / n
    train_s = time.time() - t_train
    if rank == 0:
        print(json.dumps({"peer": "pytorch-ddp-gloo", "torch": torch.__version__, "world": world,
                          "epochs": a.epochs, "testAccuracy": acc, "trainSeconds": round(train_s, 2),
                          "processSeconds": round(time.time() - T0, 2),
                          "samplesPerSecond": round(steps_per_epoch * G * a.epochs / train_s, 1),
                          "threadsPerProcess": torch.get_num_threads()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
