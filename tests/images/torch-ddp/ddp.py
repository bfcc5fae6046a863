"""A plain torch.distributed DDP training script (Gloo, CPU). It knows nothing about ringmaster: it
reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK through init_method="env://", trains a small
classifier on a synthetic, linearly separable problem (each rank its own shard), checks that DDP
kept every rank's weights identical, and exits 0 only when the model learned (accuracy >= 0.9)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        print(f"{k}={os.environ.get(k)}", flush=True)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)                  # same problem on every rank
    w_true = torch.randn(16, 4)
    g = torch.Generator().manual_seed(rank)  # a different shard per rank
    x = torch.randn(2048, 16, generator=g)
    y = (x @ w_true).argmax(dim=1)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(5):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
            loss.backward()
            opt.step()
        print(f"rank {rank}/{world} epoch {epoch} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], t) for t in gathered)
    dist.all_reduce(acc)
    acc = acc.item() / world
    print(f"rank {rank}: accuracy {acc:.4f} weights identical on all ranks: {same}", flush=True)
    return 0 if same and acc >= 0.9 else 1


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running destructors. In Debian's torch 1.13, freeing the DDP model destroys its
    # ProcessGroupGloo while this thread holds the GIL, and joins Gloo's worker thread, which may still
    # be freeing the last collective's tensors and needs the GIL for them: a deadlock that hung about
    # one run in eight here (gdb: ~ProcessGroupGloo in std::thread::join, runLoop in
    # PyEval_AcquireThread). Every collective has completed by now, so there is nothing left to tear down.
    os._exit(rc)
