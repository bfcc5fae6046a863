#!/usr/bin/python3
"""torch_rpc_ps.py — the PyTorch 1.13 anchor for bench/ps: PyTorch's own parameter-server
style, a server process holding the model and its optimizer, trainers talking to it through
torch.distributed.rpc, as in PyTorch's tutorial "Implementing Batch RPC Processing Using
Asynchronous Executions" (BatchUpdateParameterServer): each trainer computes the gradient of its
batch on the parameters it holds and calls update_and_fetch_model(grads) on the server; the server
(@rpc.functions.async_execution) sums the gradients of the step and, once all N trainers sent
theirs, averages them, applies the optimizer and answers every trainer with the new parameters.
That is synchronous PS with b = 0, the comparison for ringmaster's `mode: sync, backupWorkers: 0`.

Same model (784-512-256-10 MLP unless --hidden), per-trainer batch, optimizer (SGD momentum 0.9,
lr 0.02 per 64 samples scaled by the global batch / 64, linear warmup over --warmup epochs, then
cosine) and data order (per-epoch permutation, trainer r takes positions r, r+n, ... of each global
batch) as bench/train/torch_ddp.py; one intra-op thread per process. The server evaluates after
every epoch. Prints one JSON line: samples/s (all trainers, steps after the first 20), per-epoch test
accuracy with elapsed seconds, and the seconds to --target.

usage: torch_rpc_ps.py --world N [--epochs E] [--batch B] [--hidden 512,256] [--target 0.88]
                       [--max-seconds S]
"""
import argparse, gzip, json, math, os, socket, struct, sys, threading, time

import numpy as np
import torch
import torch.distributed.rpc as rpc
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


def make_model(hidden):
    torch.manual_seed(42)
    dims = [784] + hidden + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class BatchUpdateParameterServer:
    """The tutorial's server: the model, its optimizer, and a future per step."""

    def __init__(self, a):
        self.a = a
        self.model = make_model(a.hidden)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr, momentum=0.9)
        self.lock = threading.Lock()
        self.future = torch.futures.Future()
        self.pending = 0
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        self.steps = 0

    def get_model(self):
        return [p.detach().clone() for p in self.model.parameters()]

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(ps_rref, grads, lr):
        self = ps_rref.local_value()
        with self.lock:
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            self.pending += 1
            fut = self.future
            if self.pending >= self.a.world:
                for p in self.model.parameters():
                    p.grad /= self.a.world
                for grp in self.opt.param_groups:
                    grp["lr"] = lr
                self.opt.step()
                self.opt.zero_grad(set_to_none=False)
                self.steps += 1
                self.pending = 0
                fut.set_result([p.detach().clone() for p in self.model.parameters()])
                self.future = torch.futures.Future()
        return fut

    def evaluate(self):
        xte = torch.from_numpy(idx(f"{DATA}/t10k-images-idx3-ubyte.gz").copy()).float().div_(255.0)
        yte = torch.from_numpy(idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
        with torch.no_grad():
            return (self.model(xte).argmax(1) == yte).float().mean().item()


def trainer(rank, a, ps_rref, t0, stop_at):
    torch.set_num_threads(1)
    xtr = torch.from_numpy(idx(f"{DATA}/train-images-idx3-ubyte.gz").copy())
    ytr = torch.from_numpy(idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    model = make_model(a.hidden)
    with torch.no_grad():
        for p, v in zip(model.parameters(), ps_rref.rpc_sync().get_model()):
            p.copy_(v)
    n, G = xtr.shape[0], a.batch * a.world
    spe = n // G
    steps = 0
    for ep in range(a.epochs):
        perm = torch.from_numpy(np.random.RandomState(ep).permutation(n))
        for s in range(spe):
            if time.time() > stop_at:
                return steps
            ids = perm[s * G + rank: (s + 1) * G: a.world]
            x = xtr[ids].float().div_(255.0)
            model.zero_grad()
            F.cross_entropy(model(x), ytr[ids]).backward()
            lr = lr_at(ep + s / spe, a.lr, G, a.warmup, a.epochs)
            new = rpc.rpc_sync(ps_rref.owner(), BatchUpdateParameterServer.update_and_fetch_model,
                               args=(ps_rref, [p.grad for p in model.parameters()], lr))
            with torch.no_grad():
                for p, v in zip(model.parameters(), new):
                    p.copy_(v)
            steps += 1
    return steps


def run(rank, a, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=max(8, 2 * a.world), rpc_timeout=300)
    if rank == 0:
        rpc.init_rpc("ps", rank=0, world_size=a.world + 1, rpc_backend_options=opts)
        ps = BatchUpdateParameterServer(a)
        ps_rref = rpc.RRef(ps)
        t0 = time.time()
        stop_at = t0 + a.max_seconds
        futs = [rpc.rpc_async(f"trainer{r}", trainer, args=(r, a, ps_rref, t0, stop_at))
                for r in range(a.world)]
        # per-epoch accuracy: watch the server's step count
        n, G = 60000, a.batch * a.world
        spe, evals, hit, warm = n // G, [], None, None
        next_ep = 1
        while not all(f.done() for f in futs):
            time.sleep(0.05)
            if warm is None and ps.steps >= 20:
                warm = (time.time(), ps.steps)
            if ps.steps >= next_ep * spe:
                acc = ps.evaluate()
                evals.append({"epoch": next_ep, "testAccuracy": round(acc, 4),
                              "seconds": round(time.time() - t0, 2)})
                if hit is None and acc >= a.target:
                    hit = time.time() - t0
                next_ep += 1
        steps = [f.wait() for f in futs]
        t1 = time.time()
        acc = ps.evaluate()
        sps = ((ps.steps - warm[1]) * G / (t1 - warm[0])) if warm and t1 > warm[0] else 0
        print(json.dumps({"peer": "torch.distributed.rpc parameter server (sync, batch update)",
                          "world": a.world, "hidden": a.hidden, "epochs": a.epochs,
                          "steps": ps.steps, "trainer_steps": steps, "seconds": round(t1 - t0, 2),
                          "samples_per_second": round(sps, 1), "test_accuracy": round(acc, 4),
                          "evaluations": evals,
                          "seconds_to_target": None if hit is None else round(hit, 2),
                          "target": a.target}), flush=True)
    else:
        rpc.init_rpc(f"trainer{rank - 1}", rank=rank, world_size=a.world + 1,
                     rpc_backend_options=opts)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--hidden", default="512,256")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--max-seconds", type=float, default=3600)
    a = ap.parse_args()
    a.hidden = [int(h) for h in a.hidden.split(",") if h]
    if a.world < 1 or a.epochs < 1 or a.batch < 1 or not a.hidden:
        sys.exit("torch_rpc_ps.py: --world, --epochs, --batch >= 1 and --hidden non-empty")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run, args=(a, port), nprocs=a.world + 1, join=True)


if __name__ == "__main__":
    main()
