#!/usr/bin/env python3
"""torch_step.py — the PyTorch side of the GPU step-time comparison (bench/gpu/run.sh).

Same model as ringmaster's worker (784 -> hidden... -> 10, ReLU, softmax cross-entropy with mean
reduction), same batch, SGD with momentum 0.9, fp32 master weights with bf16 autocast for the
matrix products, the batch resident on the GPU. Two modes: eager and torch.compile (default
mode). TF32 is allowed for fp32 matmuls, as ringmaster does.
Prints one line per mode: RESULT impl=torch-eager|torch-compile name=... ms_per_step=... tflops=...
Usage: torch_step.py --hidden 512,256 --batch 64 [--precision bf16|fp16|fp32] [--steps 200]
"""
import argparse
import sys
import time

import torch


def build(hidden, dev):
    dims = [784] + hidden + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(dev), dims


def run(mode, args, hidden, dev):
    torch.manual_seed(42)
    model, dims = build(hidden, dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    x = torch.rand(args.batch, 784, device=dev)
    y = torch.arange(args.batch, device=dev) % 10
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]
    scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast("cuda", dtype=dtype):
                loss = lossf(model(x), y)
        else:
            loss = lossf(model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    fn = torch.compile(step) if mode == "torch-compile" else step
    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = fn()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    flops = sum((4.0 if i == 0 else 6.0) * args.batch * dims[i] * dims[i + 1] for i in range(len(dims) - 1))
    shape = "-".join(str(d) for d in dims)
    print(f"RESULT impl={mode} name={args.name} shape={shape} batch={args.batch} "
          f"precision={args.precision} ms_per_step={dt * 1e3:.4f} tflops={flops / dt / 1e12:.1f} "
          f"loss={loss.item():.4f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", default="512,256")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--name", default="mlp")
    p.add_argument("--modes", default="torch-eager,torch-compile")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU present (torch.cuda.is_available() is False)")
        return 0
    # TF32 for fp32 matmuls, as ringmaster does. PyTorch >= 2.9 (2.11 is the peer) spells it
    # fp32_precision and deprecates allow_tf32; older versions only have allow_tf32.
    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        mm.fp32_precision = "tf32"
    else:
        mm.allow_tf32 = True
    hidden = [int(h) for h in args.hidden.split(",") if h]
    for mode in args.modes.split(","):
        try:
            run(mode, args, hidden, "cuda")
        except Exception as e:  # torch.compile may be unavailable (no triton): say so, keep going
            print(f"RESULT impl={mode} name={args.name} error={type(e).__name__}:{str(e)[:120]!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
