"""An elastic DDP training script for torchrun (Gloo, CPU), written to torchrun's elastic contract
(torch docs, "elastic/train_script"): every (re)start loads the newest checkpoint, joins the group
torchrun formed (RANK, WORLD_SIZE, MASTER_ADDR from the agent) and trains on; rank 0 checkpoints
every CKPT_EVERY steps. It knows nothing about ringmaster. A group of any size trains the same
global batch: each step's GLOBAL_BATCH samples are split among the ranks there are, so losing a node
changes the speed, not the result. Exits 0 only when the model learned (accuracy >= 0.9).

Environment: ELASTIC_CKPT_DIR (shared by every pod: a PVC), ELASTIC_STEPS (default 240),
ELASTIC_STEP_SLEEP (seconds per step, default 0.05: a run long enough to lose a pod in)."""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 96
CKPT_EVERY = 10


def problem():
    torch.manual_seed(1234)
    w_true = torch.randn(16, 4)
    x = torch.randn(8192, 16, generator=torch.Generator().manual_seed(7))
    return x, (x @ w_true).argmax(dim=1)


def save(path, step, model, opt):
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.module.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)  # a reader sees the old checkpoint or the new one, never half of one
    with open(os.path.join(os.path.dirname(path), "progress.json.tmp"), "w") as f:
        json.dump({"step": step, "world": dist.get_world_size()}, f)
    os.replace(os.path.join(os.path.dirname(path), "progress.json.tmp"),
               os.path.join(os.path.dirname(path), "progress.json"))


def main():
    ckdir = os.environ.get("ELASTIC_CKPT_DIR", "/tmp/elastic")
    steps = int(os.environ.get("ELASTIC_STEPS", "240"))
    pause = float(os.environ.get("ELASTIC_STEP_SLEEP", "0.05"))
    os.makedirs(ckdir, exist_ok=True)
    path = os.path.join(ckdir, "model.pt")
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = problem()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = 0
    if os.path.exists(path):  # the elastic contract: resume, whatever the group size now
        ck = torch.load(path)
        model.module.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["step"]
    print(f"rank {rank}/{world} restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
          f"resumed at step {start}", flush=True)
    per = GLOBAL_BATCH // world
    for step in range(start, steps):
        lo = (step * GLOBAL_BATCH) % (len(x) - GLOBAL_BATCH) + rank * per
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[lo:lo + per]), y[lo:lo + per])
        loss.backward()
        opt.step()
        time.sleep(pause)
        if rank == 0 and (step + 1) % CKPT_EVERY == 0:
            save(path, step + 1, model, opt)
            print(f"rank 0/{world} step {step + 1} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean()
    dist.all_reduce(acc)
    acc = acc.item() / world
    print(f"rank {rank}/{world}: finished {steps} steps, accuracy {acc:.4f}", flush=True)
    return 0 if acc >= 0.9 else 1


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # as ddp.py: Debian's torch 1.13 can deadlock tearing down ProcessGroupGloo
