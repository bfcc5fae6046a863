#!/usr/bin/python3
"""gpt_ref.py — a plain PyTorch GPT-2, the reference ringmaster's transformer is checked against
(docs/models-and-data.md, "The transformer" and "Exported models").

Parameter names and layouts are Hugging Face GPT2LMHeadModel's state dict (Conv1D weights stored
[in, out]): transformer.wte/wpe, transformer.h.{i}.ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
mlp.c_proj, transformer.ln_f; tanh GELU (gelu_new); LayerNorm eps from config.json (1e-5); causal
attention scaled by 1/sqrt(head_dim); the head tied to wte. PyTorch 1.13 (Debian's python3-torch)
and numpy only: no `transformers`, no `safetensors` (tests/py/st_lite.py reads and writes them).

  gpt_ref.py grads --model DIR --batch FILE --out FILE [--seq T]
      FILE: raw little-endian int32 [B, T+1] token windows (T = --seq, default n_positions);
      inputs [:, :T], targets [:, 1:]; mean cross-entropy over the B*T tokens, backward; writes a
      safetensors file with every parameter's gradient under its name and the scalar `loss`.
  gpt_ref.py generate --model DIR (--prompt TEXT | --prompt-tokens 1,2,3) --tokens N
      greedy decoding, conditioning on the last n_positions tokens; writes the prompt and the N
      generated tokens to stdout: bytes for a text prompt (vocabulary 256), else the ids.
  gpt_ref.py init --config FILE|JSON --out DIR --seed S [--std D]
      GPT-2's initialisation (N(0, D = 0.02), residual projections N(0, D/sqrt(2 n_layer)),
      LayerNorm 1/0, biases 0) written as DIR/model.safetensors + DIR/config.json; a larger D
      gives a random model whose logits are far apart (a greedy comparison without near-ties).
  gpt_ref.py selftest
      this model against an independent formulation (F.layer_norm, F.multi_head_attention_forward,
      F.gelu(approximate="tanh"), F.linear) in float64, and torch.autograd.gradcheck of a tiny one.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_lite  # noqa: E402

KEYS = ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")


def param_shapes(cfg):
    """{name: shape} of GPT2LMHeadModel's parameters (lm_head tied: not listed), in HF's order."""
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    s = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        s.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                  p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                  p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                  p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                  p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                  p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    s["transformer.ln_f.weight"] = (C,)
    s["transformer.ln_f.bias"] = (C,)
    return s


def load_model(d, dtype=torch.float32):
    """(config, {name: leaf tensor requiring grad}) from DIR/config.json + DIR/model.safetensors."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") != "gpt2":
        raise SystemExit("%s/config.json: model_type %r is not gpt2" % (d, cfg.get("model_type")))
    cfg.setdefault("layer_norm_epsilon", 1e-5)
    t, _ = st_lite.load(os.path.join(d, "model.safetensors"))
    want = param_shapes(cfg)
    for name, shape in want.items():
        if name not in t:
            raise SystemExit("%s: tensor %s missing" % (d, name))
        if tuple(t[name].shape) != shape:
            raise SystemExit("%s: tensor %s shape %s != %s" % (d, name, t[name].shape, shape))
    extra = [n for n in t if n not in want and n != "lm_head.weight" and not n.endswith((".attn.bias", ".attn.masked_bias"))]
    if extra:
        raise SystemExit("%s: tensors the model does not have: %s" % (d, extra))
    return cfg, {n: torch.tensor(t[n], dtype=dtype).requires_grad_(True) for n in want}


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def forward(cfg, p, idx):
    """Logits [B, T, V] of token ids idx [B, T] (T <= n_positions)."""
    B, T = idx.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd = C // NH
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        h = "transformer.h.%d." % i
        a = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # Conv1D: x @ W[in, out] + b
        q, k, v = (t.view(B, T, NH, hd).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        m = gelu_new(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return x @ p["transformer.wte.weight"].t()  # the head tied to wte


def forward_independent(cfg, p, idx):
    """The same model through torch's own modules (F.layer_norm, F.multi_head_attention_forward (what nn.MultiheadAttention
    runs), tanh GELU, F.linear on transposed Conv1D weights): what selftest compares forward() with."""
    B, T = idx.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    dt = p["transformer.wte.weight"].dtype
    x = F.embedding(idx, p["transformer.wte.weight"]) + F.embedding(torch.arange(T), p["transformer.wpe.weight"])
    causal = torch.triu(torch.full((T, T), float("-inf"), dtype=dt), diagonal=1)
    for i in range(cfg["n_layer"]):
        h = "transformer.h.%d." % i
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        y, _ = F.multi_head_attention_forward(
            a.transpose(0, 1), a.transpose(0, 1), a.transpose(0, 1), C, NH,
            p[h + "attn.c_attn.weight"].t(), p[h + "attn.c_attn.bias"], None, None, False, 0.0,
            p[h + "attn.c_proj.weight"].t(), p[h + "attn.c_proj.bias"], training=False,
            need_weights=False, attn_mask=causal)
        x = x + y.transpose(0, 1)
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"].t(), p[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(m, p[h + "mlp.c_proj.weight"].t(), p[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return F.linear(x, p["transformer.wte.weight"])


def mean_xent(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def cmd_grads(a):
    cfg, p = load_model(a.model)
    T = a.seq or cfg["n_positions"]
    raw = np.fromfile(a.batch, dtype="<i4")
    if raw.size == 0 or raw.size % (T + 1):
        raise SystemExit("%s: %d tokens is not a whole number of %d-token windows" % (a.batch, raw.size, T + 1))
    w = torch.from_numpy(raw.astype(np.int64).reshape(-1, T + 1))
    if int(w.min()) < 0 or int(w.max()) >= cfg["vocab_size"]:
        raise SystemExit("%s: token out of range [0, %d)" % (a.batch, cfg["vocab_size"]))
    loss = mean_xent(forward(cfg, p, w[:, :T]), w[:, 1:])
    loss.backward()
    out = {n: t.grad.numpy() for n, t in p.items()}
    out["loss"] = np.array(loss.item(), dtype=np.float32)
    st_lite.save(a.out, out)
    print("loss %.6f over %d x %d tokens" % (loss.item(), w.shape[0], T), file=sys.stderr)


def cmd_generate(a):
    cfg, p = load_model(a.model)
    if a.prompt_tokens is not None:
        toks = [int(s) for s in a.prompt_tokens.split(",") if s.strip()]
    else:
        toks = list(a.prompt.encode())
    if not toks:
        raise SystemExit("generate: an empty prompt")
    if max(toks) >= cfg["vocab_size"] or min(toks) < 0:
        raise SystemExit("generate: a prompt token is outside the vocabulary (%d)" % cfg["vocab_size"])
    T = cfg["n_positions"]
    gen = []
    with torch.no_grad():
        for _ in range(a.tokens):
            ctx = (toks + gen)[-T:]
            logits = forward(cfg, p, torch.tensor([ctx]))[0, -1]
            gen.append(int(torch.argmax(logits)))  # the first maximum, as a C loop's `>` finds it
    if a.prompt_tokens is not None:
        sys.stdout.write(",".join(str(t) for t in toks + gen) + "\n")
    else:
        if max(gen, default=0) > 255:
            raise SystemExit("generate: token ids above 255 are not bytes (use --prompt-tokens)")
        sys.stdout.buffer.write(bytes(toks + gen))
    sys.stdout.flush()


def cmd_init(a):
    cfg = json.loads(a.config) if a.config.lstrip().startswith("{") else json.load(open(a.config))
    for k in KEYS:
        if not isinstance(cfg.get(k), int) or cfg[k] < 1:
            raise SystemExit("init: config key %s must be a positive integer" % k)
    if cfg["n_embd"] % cfg["n_head"]:
        raise SystemExit("init: n_head must divide n_embd")
    full = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_ctx": cfg["n_positions"],
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    full.update({k: cfg[k] for k in KEYS})
    g = torch.Generator().manual_seed(a.seed)
    out = {}
    for name, shape in param_shapes(full).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            t = torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            std = a.std / math.sqrt(2 * full["n_layer"]) if name.endswith("c_proj.weight") else a.std
            t = torch.randn(shape, generator=g) * std
        out[name] = t.numpy()
    os.makedirs(a.out, exist_ok=True)
    st_lite.save(os.path.join(a.out, "model.safetensors"), out)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(full, f, indent=2)
        f.write("\n")


def rel(a, b):
    return float((a - b).norm() / b.norm())


def cmd_selftest(a):
    torch.manual_seed(0)
    cfg = {"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 6, "vocab_size": 13, "layer_norm_epsilon": 1e-5}
    p = {n: (torch.randn(s, dtype=torch.float64) * 0.3).requires_grad_(True) for n, s in param_shapes(cfg).items()}
    idx = torch.randint(0, 13, (3, 6))
    tgt = torch.randint(0, 13, (3, 6))
    l1 = mean_xent(forward(cfg, p, idx), tgt)
    g1 = torch.autograd.grad(l1, list(p.values()))
    l2 = mean_xent(forward_independent(cfg, p, idx), tgt)
    g2 = torch.autograd.grad(l2, list(p.values()))
    worst = max(rel(x, y) for x, y in zip(g1, g2))
    print("loss %.12f vs independent %.12f; worst gradient relative difference %.2e" % (l1.item(), l2.item(), worst))
    assert abs(l1.item() - l2.item()) < 1e-12 and worst < 1e-10, "the two formulations disagree"
    # causality: changing the last token changes no earlier position's logits
    idx2 = idx.clone()
    idx2[:, -1] = (idx2[:, -1] + 1) % 13
    with torch.no_grad():
        d = (forward(cfg, p, idx) - forward(cfg, p, idx2))[:, :-1].abs().max().item()
    assert d == 0, "a later token changed an earlier position (%g)" % d
    # gradcheck of the loss in every parameter of a smaller model (central differences, float64)
    small = dict(cfg, n_layer=1, n_embd=4, n_positions=3, vocab_size=5)
    ps = {n: (torch.randn(s, dtype=torch.float64) * 0.5).requires_grad_(True) for n, s in param_shapes(small).items()}
    i3, t3 = torch.randint(0, 5, (2, 3)), torch.randint(0, 5, (2, 3))
    names = list(ps)

    def f(*ts):
        return mean_xent(forward(small, dict(zip(names, ts)), i3), t3)

    assert torch.autograd.gradcheck(f, tuple(ps[n] for n in names), eps=1e-6, atol=1e-8)
    print("selftest ok: gradcheck passed, forward == independent formulation, causal")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grads")
    g.add_argument("--model", required=True)
    g.add_argument("--batch", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--seq", type=int, default=0)
    g.set_defaults(fn=cmd_grads)
    s = sub.add_parser("generate")
    s.add_argument("--model", required=True)
    s.add_argument("--prompt")
    s.add_argument("--prompt-tokens")
    s.add_argument("--tokens", type=int, required=True)
    s.set_defaults(fn=cmd_generate)
    i = sub.add_parser("init")
    i.add_argument("--config", required=True)
    i.add_argument("--out", required=True)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--std", type=float, default=0.02, help="weights' deviation (GPT-2: 0.02)")
    i.set_defaults(fn=cmd_init)
    t = sub.add_parser("selftest")
    t.set_defaults(fn=cmd_selftest)
    a = ap.parse_args()
    if a.cmd == "generate" and (a.prompt is None) == (a.prompt_tokens is None):
        ap.error("generate: give one of --prompt and --prompt-tokens")
    torch.set_num_threads(1)
    a.fn(a)


if __name__ == "__main__":
    main()
