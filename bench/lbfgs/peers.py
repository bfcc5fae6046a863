#!/usr/bin/python3
"""bench/lbfgs/peers.py — the anchors of bench/lbfgs/run.sh in PyTorch 1.13 on the same
model (784-HIDDEN-10 MLP, ReLU, softmax cross-entropy), the same data (Fashion-MNIST, pixels / 255,
the first FULL training samples) and the same initial-weight scheme (PyTorch's default init, not
ringmaster's): training loss over the full batch after each pass over the data for
  gd     full-batch gradient descent (one step per pass, lr GD_LR),
  sgd    synchronous minibatch SGD with momentum 0.9 (one epoch per pass, batch SGD_BATCH, lr SGD_LR),
  lbfgs  torch.optim.LBFGS, full batch, history 10, strong Wolfe line search (one .step() = one
         outer iteration; its passes are counted as the closure's evaluations).
Prints CSV: method,pass,loss,seconds.
Usage: peers.py PASSES HIDDEN FULL [threads]"""
import gzip
import struct
import sys
import time

import torch

PASSES, HIDDEN, FULL = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
GD_LR, SGD_LR, SGD_BATCH = 0.5, 0.02 * 256 / 64, 256
D = "/usr/share/datasets/fashion-mnist"


def load(kind):
    with gzip.open(f"{D}/{kind}-images-idx3-ubyte.gz") as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float().view(n, r * c) / 255.0
    with gzip.open(f"{D}/{kind}-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return x, y


X, Y = load("train")
X, Y = X[:FULL], Y[:FULL]
lossf = torch.nn.CrossEntropyLoss()


def model():
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(784, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))


def full_loss(m):
    with torch.no_grad():
        return lossf(m(X), Y).item()


def run_gd():
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=GD_LR)
    t0 = time.time()
    for p in range(PASSES):
        opt.zero_grad()
        loss = lossf(m(X), Y)
        loss.backward()
        print(f"gd,{p},{loss.item():.6f},{time.time() - t0:.3f}", flush=True)
        opt.step()


def run_sgd():
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=SGD_LR, momentum=0.9)
    g = torch.Generator().manual_seed(42)
    t0 = time.time()
    print(f"sgd,0,{full_loss(m):.6f},0.000", flush=True)
    for p in range(1, PASSES):
        perm = torch.randperm(FULL, generator=g)
        for i in range(0, FULL - SGD_BATCH + 1, SGD_BATCH):
            idx = perm[i:i + SGD_BATCH]
            opt.zero_grad()
            lossf(m(X[idx]), Y[idx]).backward()
            opt.step()
        print(f"sgd,{p},{full_loss(m):.6f},{time.time() - t0:.3f}", flush=True)


def run_lbfgs():
    m = model()
    opt = torch.optim.LBFGS(m.parameters(), lr=1, history_size=10, max_iter=1,
                            line_search_fn="strong_wolfe")
    evals = [0]
    t0 = time.time()

    def closure():
        opt.zero_grad()
        loss = lossf(m(X), Y)
        loss.backward()
        print(f"lbfgs,{evals[0]},{loss.item():.6f},{time.time() - t0:.3f}", flush=True)
        evals[0] += 1
        return loss

    while evals[0] < PASSES:
        opt.step(closure)


for f in (run_gd, run_sgd, run_lbfgs):
    f()
