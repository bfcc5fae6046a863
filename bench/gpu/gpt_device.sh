#!/usr/bin/env bash
# bench/gpu/gpt_device.sh LOGDIR — GPT-2 124M on one GPU through the real launch path, then its
# export in Hugging Face transformers (bench/gpu/device.sh's "gpt" phase; docs/gpu.md).
#
#  1. synthetic llm.c token shards with GPT-2's vocabulary (50,257): the device machine has no
#     tokenizer and reaches no data set. Not uniform noise - every sequence follows a fixed random
#     successor map over 4,096 of the ids (restarted at random places), so the loss falls and the
#     logits that the export check compares are peaked, as a trained model's are;
#  2. `RINGMASTER_DEVICE=cuda ringmaster run` of deploy/examples/gpt2-124m-gpu.yaml with one worker
#     (NCCL with world 1, bf16, AdamW, clipping), GPT_STEPS steps; tokens/s and MFU from the
#     workers' progress (median of the reports after the first quarter), the final valLoss (the last 1% of train.bin, held out);
#  3. the end-of-run export (model.safetensors + config.json): the worker's logits for a prompt
#     (`ringmaster-worker sample --logits`, the CPU kernels on the exported weights) against
#     GPT2LMHeadModel.from_pretrained on the GPU in fp32 and in bf16 autocast.
# Prints RESULT lines. GPT_SMALL=1 rehearses it all on a CPU (a 2-layer model, no GPU, no
# transformers needed: that check then says SKIP).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
logs=${1:-build/gpt-device}
mkdir -p "$logs"
RM_BIN=${RM_BIN:-$root/bin}
PY=${PYTHON:-python3}
steps=${GPT_STEPS:-200}
data=/tmp/rm-gpt-data ck=/tmp/rm-gpt-ck
rm -rf "$data" "$ck"
mkdir -p "$data"

"$PY" - "$data" <<'PY' || { echo "FAIL writing the token shards"; exit 1; }
import struct, sys
import numpy as np
rng = np.random.default_rng(1234)
V, K = 50257, 4096
ids = rng.choice(V, K, replace=False)
succ = {int(a): int(b) for a, b in zip(ids, np.roll(ids, -1))}
def stream(n):
    out = np.empty(n, dtype=np.uint16)
    i = 0
    while i < n:
        t = int(ids[rng.integers(K)])
        run = int(rng.integers(200, 2000))
        for _ in range(min(run, n - i)):
            out[i] = t; t = succ[t]; i += 1
    return out
for name, n in (("train.bin", 4_000_000), ("val.bin", 200_000)):
    toks = stream(n)
    hdr = np.zeros(256, dtype=np.int32); hdr[0], hdr[1], hdr[2] = 20240520, 1, n
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(hdr.tobytes()); f.write(toks.tobytes())
print(f"token shards: {sys.argv[1]}/train.bin 4,000,000 tokens, val.bin 200,000 (vocabulary {V}, {K} ids used)")
PY

m=$logs/gpt2-124m-1gpu.yaml
sed -e 's/^  replicas: 8$/  replicas: 1/' -e 's/^  minReplicas: 4$/  minReplicas: 1/' \
    -e 's/^  maxReplicas: 8$/  maxReplicas: 1/' -e "s|uri: /data/fineweb10B|uri: $data/train.bin|" \
    -e "s/maxSteps: 20000/maxSteps: $steps/" -e 's/warmupSteps: 700/warmupSteps: 20/' \
    -e "s/evalEverySteps: 1000/evalEverySteps: $steps/" -e 's/intervalSteps: 1000/intervalSteps: 100000/' \
    deploy/examples/gpt2-124m-gpu.yaml >"$m"
if [ "${GPT_SMALL:-0}" = 1 ]; then
  sed -i -e 's/layers: 12, heads: 12, embed: 768, context: 1024/layers: 2, heads: 2, embed: 64, context: 64/' \
         -e 's/batchSizePerWorker: 16/batchSizePerWorker: 4/' "$m"
else
  export RINGMASTER_DEVICE=cuda
fi
for want in "replicas: 1" "maxSteps: $steps" "uri: $data/train.bin"; do
  grep -q "$want" "$m" || { echo "FAIL the example changed: no '$want' after editing"; exit 1; }
done

export RINGMASTER_LOG_EVERY=${RINGMASTER_LOG_EVERY:-10}   # progress lines often enough for a steady median
t0=$SECONDS
"$RM_BIN/ringmaster" run -f "$m" --checkpoint-dir "$ck" --run-dir "$logs/run" -o json >"$logs/run.json" 2>"$logs/run.err"
rc=$?
tail -n 5 "$logs/run.err"
echo "ringmaster run rc=$rc in $((SECONDS - t0)) s"
grep -h 'progress\|tokens_per_s' "$logs"/run/worker-0.log | tail -n 3
"$PY" - "$logs" "$rc" <<'PY'
import json, re, statistics, sys
logs, rc = sys.argv[1], int(sys.argv[2])
try:
    job = json.loads(open(f"{logs}/run.json").read().strip().splitlines()[-1])
except Exception as e:
    print(f"RESULT impl=ringmaster model=gpt2-124m error=no-final-json rc={rc} ({e})"); sys.exit(0)
st = job.get("status", {}); res = st.get("result", {}) or {}
tps = []
for line in open(f"{logs}/run/worker-0.log", errors="replace"):
    mm = re.search(r"tokens_per_s=([0-9.]+)", line)
    if mm: tps.append(float(mm.group(1)))
steady = tps[len(tps) // 4:] or tps
tok = statistics.median(steady) if steady else float(res.get("tokensPerSecond") or 0)
flops_tok = 6 * (124439808 - 1024 * 768) + 12 * 12 * 768 * 1024  # nanoGPT/PaLM, as torch_gpt2.py
print(f"RESULT impl=ringmaster model=gpt2-124m phase={st.get('phase')} steps={res.get('steps')} "
      f"tokens_per_s={tok:.0f} tokens_per_s_status={res.get('tokensPerSecond')} "
      f"tflops={tok * flops_tok / 1e12:.1f} mfu_pct={100 * tok * flops_tok / 989e12:.1f} "
      f"val_loss={res.get('valLoss')} train_loss={res.get('trainLoss')} reports={len(tps)}")
PY

# ---- the export in transformers --------------------------------------------------------------
ex=$ck/export
ls -la "$ex" 2>&1 | tail -n 3
prompt=$("$PY" -c "
import numpy as np
t = np.fromfile('$data/val.bin', dtype=np.uint16, offset=1024)[:64]
print(','.join(str(int(x)) for x in t))")
"$RM_BIN/ringmaster-worker" sample --model "$ex" --prompt-tokens "$prompt" --tokens 0 --logits "$logs/rm_logits.bin" \
  --threads "$(nproc)" >/dev/null 2>"$logs/sample.err" || { echo "FAIL sample --logits: $(tail -n 2 "$logs/sample.err")"; }
"$PY" - "$ex" "$prompt" "$logs/rm_logits.bin" <<'PY'
import sys
import numpy as np
ex, prompt, path = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], sys.argv[3]
try:
    import torch
    from transformers import GPT2LMHeadModel
except Exception as e:
    print(f"SKIP export check: no transformers ({type(e).__name__})"); sys.exit(0)
rm = np.fromfile(path, dtype=np.float32)
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False
model = GPT2LMHeadModel.from_pretrained(ex).to(dev).eval()
x = torch.tensor([prompt], device=dev)
with torch.no_grad():
    f32 = model(x).logits[0].float().cpu().numpy()
    with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        b16 = model(x).logits[0].float().cpu().numpy()
rm = rm.reshape(f32.shape)
def rel(a, b): return float(np.linalg.norm(a - b) / np.linalg.norm(b))
agree = float((rm.argmax(-1) == f32.argmax(-1)).mean())
print(f"RESULT kind=export-check model=gpt2-124m positions={len(prompt)} rel_err_fp32={rel(rm, f32):.2e} "
      f"rel_err_bf16={rel(rm, b16):.2e} argmax_agree={agree:.3f} nan={int(np.isnan(rm).sum())}")
PY
exit $rc
