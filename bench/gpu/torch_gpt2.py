#!/usr/bin/env python3
"""bench/gpu/torch_gpt2.py - the PyTorch 2.x peer of ringmaster's GPT on a GPU (bench/gpu/device.sh).

The model is bench/gpt/torch_gpt.py's GPT-2 (the CPU peer: same blocks, tied head, initialisation,
nanoGPT's FLOP count), with causal attention through F.scaled_dot_product_attention (FlashAttention
on sm_80+, what nanoGPT uses on GPUs) instead of the explicit masked softmax. Training as llm.c and
nanoGPT run GPT-2 124M on GPUs: fp32 master weights, bf16 autocast, AdamW fused
(torch.optim.AdamW(fused=True)), TF32 allowed for fp32 matmuls. Vocabulary 50,257 (GPT-2's; nanoGPT
pads it to 50,304 for speed - ringmaster does not, so neither does the peer), synthetic tokens drawn
uniformly (no tokenizer on the device machine; speed does not depend on the values).

Modes (one "RESULT ..." line per measurement on stdout, progress on stderr):
  train     tokens/s of training steps, --warmup untimed then --steps timed (CUDA events), for each
            of --impl eager,compile; MFU against --peak-tflops (dense bf16; 989 = H100/H200 SXM).
  ceilings  device-to-device copy bandwidth (bytes read + written) and an 8192^3 bf16 matmul on
            random data (torch's cuBLAS), the two physical limits docs/METHOD asks for.
Without CUDA it prints "SKIP: ..." and exits 0.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpt"))
import torch_gpt as ref  # noqa: E402  (the CPU peer's model)


class FlashBlock(ref.Block):
    def forward(self, x):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT2(ref.GPT):
    def __init__(self, layers, heads, embed, context, vocab):
        super().__init__(layers, heads, embed, context, vocab)
        self.h = torch.nn.ModuleList(FlashBlock(embed, heads, 1) for _ in range(layers))
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("attn_proj.weight") or n.endswith("mlp_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.reshape(-1, self.V).float(), targets.reshape(-1))


def train(a):
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    for impl in a.impl.split(","):
        torch.manual_seed(a.seed)
        model = GPT2(a.layers, a.heads, a.embed, a.context, a.vocab).to(dev)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        fwd = torch.compile(model) if impl == "compile" else model
        g = torch.Generator(device=dev).manual_seed(a.seed)
        B, T = a.batch, a.context
        xs = [torch.randint(a.vocab, (B, T + 1), device=dev, generator=g) for _ in range(4)]

        def step(i):
            d = xs[i % len(xs)]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(d[:, :-1], d[:, 1:])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        t0 = time.perf_counter()
        for i in range(a.warmup):
            loss = step(i)
        torch.cuda.synchronize()
        print(f"{impl}: warm-up {a.warmup} steps in {time.perf_counter() - t0:.1f} s, loss {loss.item():.4f}",
              file=sys.stderr, flush=True)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(a.steps):
            loss = step(i)
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / a.steps
        tok = B * T / (ms / 1e3)
        fl = model.flops_per_step(B)
        tflops = fl / (ms / 1e3) / 1e12
        mem = torch.cuda.max_memory_allocated() / 2**30
        print(f"RESULT impl=torch-{impl} model=gpt2-{a.layers}x{a.embed} batch={B} context={T} vocab={a.vocab} "
              f"ms_per_step={ms:.2f} tokens_per_s={tok:.0f} tflops={tflops:.1f} "
              f"mfu_pct={100 * tflops / a.peak_tflops:.1f} loss={loss.item():.4f} max_mem_gib={mem:.1f} "
              f"torch={torch.__version__}", flush=True)
        del model, opt, fwd, xs
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def ceilings(a):
    dev = torch.device("cuda")
    n = 1 << 30  # 1 GiB each way: far past the L2
    src = torch.rand(n // 4, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    e0.record()
    for _ in range(reps):
        dst.copy_(src)
    e1.record()
    torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / reps / 1e3
    print(f"RESULT kind=copy bytes={2 * n} tb_per_s={2 * n / s / 1e12:.2f}", flush=True)
    del src, dst
    m = 8192
    x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        z = x @ y
    reps = 20
    e0.record()
    for _ in range(reps):
        z = x @ y
    e1.record()
    torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / reps / 1e3
    print(f"RESULT kind=torch-matmul dtype=bf16 m={m} tflops={2 * m**3 / s / 1e12:.1f}", flush=True)
    del z


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["train", "ceilings"])
    p.add_argument("--impl", default="eager,compile")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--embed", type=int, default=768)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device visible to torch", flush=True)
        return
    print(f"device {torch.cuda.get_device_name(0)} torch {torch.__version__}", file=sys.stderr, flush=True)
    train(a) if a.mode == "train" else ceilings(a)


if __name__ == "__main__":
    main()
