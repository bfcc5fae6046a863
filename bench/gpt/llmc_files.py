#!/usr/bin/python3
"""bench/gpt/llmc_files.py - the input files llm.c's CPU trainer (train_gpt2.c) reads, for our shapes.

llm.c's main() opens fixed paths relative to its working directory; this writes them into DIR:
  gpt2_124M.bin        the model: 256 x int32 header (magic 20240326, version 3 = fp32, max_seq_len,
                       vocab_size, num_layers, num_heads, channels, padded_vocab_size), then the fp32
                       parameters in llm.c's fixed order, per-layer tensors stacked over the layers:
                       wte [Vp,C], wpe [maxT,C], ln1w [L,C], ln1b [L,C], qkvw [L,3C,C], qkvb [L,3C],
                       attprojw [L,C,C], attprojb [L,C], ln2w, ln2b, fcw [L,4C,C], fcb [L,4C],
                       fcprojw [L,C,4C], fcprojb [L,C], lnfw [C], lnfb [C]  (Linear weights [out,in]).
                       The values are bench/gpt/torch_gpt.py's initialisation with the same seed, so
                       both peers start from the same model. Vocabulary 256 is already a multiple of
                       128: padded_vocab_size = 256.
  gpt2_tokenizer.bin   256 x uint32 header (magic 20240328, version 2, vocab_size, eot_token), then one
                       length-prefixed string per token: the 256 single bytes (eot = '\\n'). Without
                       it train_gpt2.c samples from an uninitialised end-of-text id.
  dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin
                       token shards: 256 x int32 header (magic 20240520, version 1, token count),
                       uint16 tokens: the bytes of tinyshakespeare, first 90% / last 10%.
Formats: ../shared/docs/references.md section 1.2-1.3 (llm.c train_gpt2.py write_model, data_common.py
write_datafile, train_gpt2.c gpt2_build_from_checkpoint, llmc/tokenizer.h tokenizer_init).
Usage: llmc_files.py DIR [--model baby|small] [--layers ...] [--data tinyshakespeare.txt] [--seed N]
"""
import argparse
import os
import struct
import sys

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402


def header(*vals):
    h = list(vals) + [0] * (256 - len(vals))
    return struct.pack("<256i", *h)


def write_model(path, m):
    L, C, T, V = m.L, m.C, m.T, m.V
    Vp = (V + 127) // 128 * 128
    h = m.h

    def stack(get):
        return torch.stack([get(b).detach() for b in h]).contiguous()

    wte = torch.zeros(Vp, C)
    wte[:V] = m.wte.weight.detach()
    tensors = [
        wte, m.wpe.weight.detach(),
        stack(lambda b: b.ln_1.weight), stack(lambda b: b.ln_1.bias),
        stack(lambda b: b.c_attn.weight), stack(lambda b: b.c_attn.bias),
        stack(lambda b: b.attn_proj.weight), stack(lambda b: b.attn_proj.bias),
        stack(lambda b: b.ln_2.weight), stack(lambda b: b.ln_2.bias),
        stack(lambda b: b.c_fc.weight), stack(lambda b: b.c_fc.bias),
        stack(lambda b: b.mlp_proj.weight), stack(lambda b: b.mlp_proj.bias),
        m.ln_f.weight.detach(), m.ln_f.bias.detach(),
    ]
    with open(path, "wb") as f:
        f.write(header(20240326, 3, T, V, L, m.H, C, Vp))
        for t in tensors:
            f.write(t.to(torch.float32).contiguous().numpy().tobytes())


def write_tokenizer(path, eot=10):
    with open(path, "wb") as f:
        f.write(struct.pack("<256I", *([20240328, 2, 256, eot] + [0] * 252)))
        for i in range(256):
            f.write(bytes([1, i]))


def write_shard(path, data):
    with open(path, "wb") as f:
        f.write(header(20240520, 1, len(data)))
        f.write(numpy.frombuffer(data, dtype=numpy.uint8).astype("<u2").tobytes())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--model", choices=sorted(torch_gpt.MODELS), default="baby")
    for k in ("layers", "heads", "embed", "context"):
        p.add_argument("--" + k, type=int, default=None)
    p.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "../../../shared/data/tinyshakespeare.txt"))
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    cfg = dict(torch_gpt.MODELS[a.model])
    for k in cfg:
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    torch.manual_seed(a.seed)
    m = torch_gpt.GPT(**cfg)
    os.makedirs(os.path.join(a.dir, "dev/data/tinyshakespeare"), exist_ok=True)
    write_model(os.path.join(a.dir, "gpt2_124M.bin"), m)
    write_tokenizer(os.path.join(a.dir, "gpt2_tokenizer.bin"))
    raw = open(a.data, "rb").read()
    n = int(len(raw) * 0.9)
    write_shard(os.path.join(a.dir, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin"), raw[:n])
    write_shard(os.path.join(a.dir, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin"), raw[n:])
    print(f"llmc_files: {a.dir}: {cfg}, {m.params(non_embedding=False)} parameters, "
          f"{n} train / {len(raw) - n} val tokens")


if __name__ == "__main__":
    main()
