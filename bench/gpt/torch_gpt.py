#!/usr/bin/python3
"""bench/gpt/torch_gpt.py - the PyTorch 1.13 peer of ringmaster's `model.type: gpt` (bench/gpt/run.sh).

A plain GPT-2 (docs/models-and-data.md "The transformer"): token + learned position embeddings,
pre-LayerNorm blocks (causal self-attention with one fused QKV projection and an output
projection; MLP 4*embed with tanh GELU), final LayerNorm, head tied to the token embedding,
LayerNorm eps 1e-5, biases everywhere, dropout 0, fp32. Initialisation as nanoGPT/GPT-2
(normal 0.02, residual projections 0.02/sqrt(2*layers), zero biases). AdamW with weight decay on
the 2-D tensors only (embeddings and matrices; nanoGPT's configure_optimizers), betas 0.9/0.99.
Data: the bytes of tinyshakespeare (vocabulary 256), the first 90% train, the last 10% validation
(docs/models-and-data.md "Data formats"; references.md section 2 uses the same split).

Modes (one JSON line per result on stdout, progress on stderr):
  speed    tokens/s of training steps (random train windows), after --warmup steps, best of --reps
           timed runs of --steps steps each, for every thread count in --threads (torch.set_num_threads),
           and the best of them. Also the FLOPs per step and the achieved GFLOP/s.
  quality  --steps steps (default 2000) of batch --batch (default 24 = 2 workers x 12) at constant
           lr, windows in a seeded random order, validation loss every --eval-every steps (and at
           step 0 and the end) on a fixed set of validation windows; --csv FILE gets step,val_loss,elapsed_s
           (elapsed_s: wall seconds since the first step, evaluations included).

FLOPs per step (nanoGPT model.py estimate_mfu, after PaLM appendix B):
  6 * N * tokens  +  12 * L * C * T * tokens,  tokens = B * T,
  N = parameters without the position embedding (nanoGPT's non-embedding count: the tied token
  embedding stays in, it is the head's matrix), L layers, C embed, T context. The attention term
  counts the full T x T score and value products (forward 2 matmuls of 2*T*C per token per layer,
  times 3 for backward), not the causal half.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {
    # the manifest of deploy/examples/shakespeare-gpt.yaml (nanoGPT's README CPU configuration)
    "baby": dict(layers=4, heads=4, embed=128, context=64),
    # nanoGPT's config/train_shakespeare_char.py shapes (batch 12 here, not 64: a CPU step)
    "small": dict(layers=6, heads=6, embed=384, context=256),
}


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def forward(self, x):
        B, T, C = x.shape
        H = self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        x = x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, layers, heads, embed, context, vocab=256):
        super().__init__()
        self.L, self.H, self.C, self.T, self.V = layers, heads, embed, context, vocab
        self.wte = nn.Embedding(vocab, embed)
        self.wpe = nn.Embedding(context, embed)
        self.h = nn.ModuleList(Block(embed, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(embed, eps=1e-5)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("attn_proj.weight") or n.endswith("mlp_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
        return F.cross_entropy(logits.view(-1, self.V), targets.view(-1))

    def params(self, non_embedding=True):
        n = sum(p.numel() for p in self.parameters())
        return n - self.wpe.weight.numel() if non_embedding else n

    def flops_per_step(self, B):
        """nanoGPT estimate_mfu / PaLM appendix B: 6N + 12*L*C*T per token, B*T tokens."""
        T = self.T
        return (6 * self.params() + 12 * self.L * self.C * T) * B * T


def make_optimizer(model, lr, wd, beta1, beta2, kind="adamw"):
    """adamw: decoupled decay on the 2-D tensors only (nanoGPT); adam: the spec's `type: adam`
    (L2 decay folded into the gradient, as torch.optim.Adam does)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=lr, betas=(beta1, beta2), eps=1e-8)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    try:  # multi-tensor: the fastest CPU update 1.13 has
        return cls(groups, foreach=True, **kw)
    except TypeError:
        return cls(groups, **kw)


def load_bytes(path):
    with open(path, "rb") as f:
        raw = f.read()
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.long)
    n = int(len(data) * 0.9)
    return data[:n], data[n:]


def batch(split, T, offsets):
    x = torch.stack([split[i:i + T] for i in offsets.tolist()])
    y = torch.stack([split[i + 1:i + 1 + T] for i in offsets.tolist()])
    return x, y


def train_step(model, opt, x, y, clip):
    loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss


def speed(a, train):
    out = []
    for threads in a.threads:
        torch.set_num_threads(threads)
        torch.manual_seed(a.seed)
        cfg = MODELS[a.model]
        model = GPT(**cfg)
        opt = make_optimizer(model, a.lr, a.weight_decay, a.beta1, a.beta2, a.optimizer)
        T, B = model.T, a.batch
        g = torch.Generator().manual_seed(a.seed)
        hi = len(train) - T - 1

        def step():
            x, y = batch(train, T, torch.randint(hi, (B,), generator=g))
            train_step(model, opt, x, y, a.grad_clip)

        for _ in range(a.warmup):
            step()
        best = 0.0
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            dt = time.perf_counter() - t0
            best = max(best, a.steps * B * T / dt)
        fl = model.flops_per_step(B)
        r = {"peer": "pytorch", "torch": torch.__version__, "mode": "speed", "model": a.model, **cfg,
             "batch": B, "threads": threads, "params": model.params(non_embedding=False),
             "params_non_embedding": model.params(), "flops_per_step": fl, "steps": a.steps,
             "reps": a.reps, "tokens_per_s": round(best, 1),
             "step_ms": round(1000 * B * T / best, 2), "gflops": round(fl * best / (B * T) / 1e9, 2)}
        print(json.dumps(r), flush=True)
        out.append(r)
    b = max(out, key=lambda r: r["tokens_per_s"])
    print(json.dumps({**b, "threads": "best", "best_threads": b["threads"]}), flush=True)


@torch.no_grad()
def evaluate(model, val, T, windows, chunk=64):
    model.eval()
    tot, n = 0.0, 0
    for s in range(0, len(windows), chunk):
        off = windows[s:s + chunk]
        x, y = batch(val, T, off)
        tot += model(x, y).item() * len(off)
        n += len(off)
    model.train()
    return tot / n


def quality(a, train, val):
    torch.set_num_threads(a.threads[0])
    torch.manual_seed(a.seed)
    cfg = MODELS[a.model]
    model = GPT(**cfg)
    opt = make_optimizer(model, a.lr, a.weight_decay, a.beta1, a.beta2, a.optimizer)
    T, B = model.T, a.batch
    # fixed validation windows: non-overlapping, evenly spread over the split (all of it by default)
    nwin = (len(val) - 1) // T
    stride = 1 if a.val_windows <= 0 or a.val_windows >= nwin else nwin / a.val_windows
    windows = torch.tensor(sorted({int(i * stride) * T for i in range(min(nwin, a.val_windows or nwin))}))
    # training windows in a seeded permutation of all window starts (random offsets, no repeats
    # before every start has been seen once)
    g = torch.Generator().manual_seed(a.seed)
    starts = torch.randperm(len(train) - T - 1, generator=g)
    pos = 0
    rows = []
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write("step,val_loss,elapsed_s\n")
    t0 = time.perf_counter()

    def log(step):
        v = evaluate(model, val, T, windows)
        e = time.perf_counter() - t0
        rows.append({"step": step, "val_loss": round(v, 4), "elapsed_s": round(e, 2)})
        if csv:
            csv.write(f"{step},{v:.4f},{e:.2f}\n")
            csv.flush()
        print(f"step {step} val_loss {v:.4f} elapsed {e:.1f}s", file=sys.stderr, flush=True)

    log(0)
    for step in range(1, a.steps + 1):
        if pos + B > len(starts):
            starts, pos = torch.randperm(len(train) - T - 1, generator=g), 0
        x, y = batch(train, T, starts[pos:pos + B])
        pos += B
        train_step(model, opt, x, y, a.grad_clip)
        if step % a.eval_every == 0 or step == a.steps:
            log(step)
    el = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "mode": "quality", "model": a.model, **cfg,
                      "batch": B, "threads": a.threads[0], "steps": a.steps, "lr": a.lr,
                      "val_windows": len(windows), "final_val_loss": rows[-1]["val_loss"],
                      "seconds": round(el, 2), "evals": rows}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["speed", "quality"])
    p.add_argument("--model", choices=sorted(MODELS), default="baby")
    for k in ("layers", "heads", "embed", "context"):
        p.add_argument("--" + k, type=int, default=None, help=f"override the model's {k} (a spec's value)")
    p.add_argument("--data", default=os.environ.get("RM_TINYSHAKESPEARE", ""))
    p.add_argument("--batch", type=int, default=None, help="sequences per step (speed 12, quality 24)")
    p.add_argument("--steps", type=int, default=None, help="speed: timed steps per rep (20); quality: 2000")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", default="1,2", help="comma list (quality uses the first)")
    p.add_argument("--optimizer", choices=["adamw", "adam"], default="adamw")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0, help="global norm; 0 = off")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--val-windows", type=int, default=0, help="0 = every non-overlapping window of the split")
    p.add_argument("--csv", default="")
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    a.threads = [int(t) for t in a.threads.split(",")]
    MODELS[a.model] = dict(MODELS[a.model])
    for k in ("layers", "heads", "embed", "context"):
        if getattr(a, k) is not None:
            MODELS[a.model][k] = getattr(a, k)
    if a.batch is None:
        a.batch = 12 if a.mode == "speed" else 24
    if a.steps is None:
        a.steps = 20 if a.mode == "speed" else 2000
    if not a.data:
        here = os.path.dirname(os.path.abspath(__file__))
        for c in (os.path.join(here, "../../../shared/data/tinyshakespeare.txt"),
                  "/usr/share/ringmaster/data/tinyshakespeare.txt"):
            if os.path.exists(c):
                a.data = c
                break
    if not a.data or not os.path.exists(a.data):
        sys.exit("torch_gpt.py: no tinyshakespeare.txt (--data FILE or RM_TINYSHAKESPEARE)")
    train, val = load_bytes(a.data)
    if a.mode == "speed":
        speed(a, train)
    else:
        quality(a, train, val)


if __name__ == "__main__":
    main()
