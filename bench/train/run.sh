#!/usr/bin/env bash
# bench/train/run.sh — training benchmark: ringmaster-worker vs PyTorch 1.13 DDP (Gloo) on the same
# MLP (784-512-256-10), per-worker batch 64, SGD momentum 0.9, lr 0.02 per 64 samples scaled
# linearly, 1 epoch warmup, cosine; 1 and 2 workers, one core/thread per worker.
# Measures samples/s per worker (steady state) and time to 0.88 test accuracy, the GEMM-only
# ceiling on one core (the physical limit of this step), and allocations per step (LD_PRELOAD
# counter: runs that differ only in --max-steps). Writes bench/results/train.md.
# Knobs: EPOCHS (10), TARGET (0.88), SKIP_TORCH=1, RM_BIN (bin/). Takes ~5 min on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$ROOT/bin}
W="$BIN/ringmaster-worker"
EPOCHS=${EPOCHS:-10}
TARGET=${TARGET:-0.88}
OUT="$ROOT/bench/results/train.md"
T=$(mktemp -d /tmp/rm-bench-train.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
[ -x "$W" ] || make -C "$ROOT" -j2 bin/ringmaster-worker
PY=/usr/bin/python3
freeport() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# parse one worker log -> JSON {samples_per_s, time_to_target, final_acc, evals}
parse() {
  $PY - "$1" "$TARGET" <<'PYEOF'
import json, re, sys, statistics
path, target = sys.argv[1], float(sys.argv[2])
def ts(line):
    m = re.search(r'ts=\S*T(\d+):(\d+):([\d.]+)Z', line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
t0, rates, evals, ttt, final = None, [], [], None, None
for line in open(path):
    if 'msg="round ready"' in line and t0 is None:
        t0 = ts(line)
    m = re.search(r'msg="progress".*samples_per_s=([\d.]+)', line)
    if m:
        rates.append(float(m.group(1)))
    m = re.search(r'msg="evaluation" train_epoch=(\d+).*test_accuracy=([\d.]+)', line)
    if m and t0 is not None:
        el = ts(line) - t0
        acc = float(m.group(2))
        evals.append({"epoch": int(m.group(1)) + 1, "seconds": round(el, 2), "test_accuracy": acc})
        if ttt is None and acc >= target:
            ttt = round(el, 2)
    m = re.search(r'msg="training done".*test_accuracy=([\d.]+).*seconds=([\d.]+)', line)
    if m:
        final = {"test_accuracy": float(m.group(1)), "seconds": float(m.group(2))}
print(json.dumps({"samples_per_s_per_worker": round(statistics.median(rates), 1) if rates else 0,
                  "time_to_target_s": ttt, "evals": evals, "final": final}))
PYEOF
}

echo "== ringmaster 1 worker, $EPOCHS epochs"
"$W" train --epochs "$EPOCHS" --metrics-addr off >"$T/rm1.log" 2>&1
RM1=$(parse "$T/rm1.log"); echo "$RM1"

echo "== ringmaster 2 workers (ring over loopback TCP), $EPOCHS epochs"
P="127.0.0.1:$(freeport),127.0.0.1:$(freeport)"
"$W" train --peers "$P" --rank 1 --epochs "$EPOCHS" --metrics-addr off >"$T/rm2_1.log" 2>&1 &
pids+=($!)
"$W" train --peers "$P" --rank 0 --epochs "$EPOCHS" --metrics-addr off >"$T/rm2_0.log" 2>&1
wait "${pids[-1]}"
RM2=$(parse "$T/rm2_0.log"); echo "$RM2"
F0=$(grep -o 'params_fnv64=[0-9a-f]*' "$T/rm2_0.log"); F1=$(grep -o 'params_fnv64=[0-9a-f]*' "$T/rm2_1.log")
[ "$F0" = "$F1" ] && IDENT="yes ($F0)" || IDENT="NO ($F0 vs $F1)"

echo "== GEMM-only ceiling (one core)"
cc -O2 -o "$T/gemm_limit" "$ROOT/bench/train/gemm_limit.c" -lopenblas
LIMIT=$("$T/gemm_limit" 64 3); echo "$LIMIT"

echo "== allocations per step (LD_PRELOAD counter)"
cc -shared -fPIC -O2 -o "$T/mc.so" "$ROOT/bench/train/malloc_count.c"
for s in 200 900; do
  MALLOC_COUNT_OUT="$T/mc1_$s" LD_PRELOAD="$T/mc.so" "$W" train --max-steps $s --metrics-addr off >/dev/null 2>&1
  P="127.0.0.1:$(freeport),127.0.0.1:$(freeport)"
  MALLOC_COUNT_OUT="$T/mc2b_$s" LD_PRELOAD="$T/mc.so" "$W" train --peers "$P" --rank 1 --max-steps $s --metrics-addr off --fusion-mb 0.5 >/dev/null 2>&1 &
  pids+=($!)
  MALLOC_COUNT_OUT="$T/mc2_$s" LD_PRELOAD="$T/mc.so" "$W" train --peers "$P" --rank 0 --max-steps $s --metrics-addr off --fusion-mb 0.5 >/dev/null 2>&1
  wait "${pids[-1]}"
done
A1=$(( $(cut -d' ' -f1 "$T/mc1_900") - $(cut -d' ' -f1 "$T/mc1_200") ))
A2=$(( $(cut -d' ' -f1 "$T/mc2_900") - $(cut -d' ' -f1 "$T/mc2_200") ))
echo "extra allocations for 700 more steps: 1 worker $A1, 2 workers (rank 0, ring+fusion) $A2"

TORCH1='{"samples_per_s_per_worker": 0, "time_to_target_s": null, "evals": []}'; TORCH2=$TORCH1; TDL1=$TORCH1; TDL2=$TORCH1
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  echo "== PyTorch DDP (Gloo) 1 worker"
  TORCH1=$($PY "$ROOT/bench/train/torch_ddp.py" --world 1 --epochs "$EPOCHS" --target "$TARGET" --stop-at-target --port "$(freeport)" | tail -1); echo "$TORCH1"
  echo "== PyTorch DDP (Gloo) 2 workers"
  TORCH2=$($PY "$ROOT/bench/train/torch_ddp.py" --world 2 --epochs "$EPOCHS" --target "$TARGET" --stop-at-target --port "$(freeport)" | tail -1); echo "$TORCH2"
  echo "== PyTorch DDP (Gloo), idiomatic DataLoader, 1 and 2 workers (samples/s only: 20 s each)"
  TDL1=$($PY "$ROOT/bench/train/torch_ddp.py" --world 1 --epochs 1 --max-seconds 20 --loader dataloader --port "$(freeport)" | tail -1); echo "$TDL1"
  TDL2=$($PY "$ROOT/bench/train/torch_ddp.py" --world 2 --epochs 1 --max-seconds 20 --loader dataloader --port "$(freeport)" | tail -1); echo "$TDL2"
fi

# 4 workers through `ringmaster run` (rendezvous, ring, checkpoints every 100 steps): clean, and with
# rank 1 killed at step 1050 (replaced by the runner; survivors restart in place).
REC='{}'
if [ "${SKIP_RECOVERY:-0}" != 1 ] && [ -x "$BIN/ringmaster" ]; then
  echo "== 4 workers via ringmaster run: clean vs RINGMASTER_FAULT=exit:rank=1:step=1050"
  "$BIN/ringmaster" run -f "$ROOT/deploy/examples/fashion-mnist.yaml" --epochs "$EPOCHS" \
      --checkpoint-dir "$T/ck-clean" --run-dir "$T/run-clean" -o json >"$T/clean.json" 2>"$T/clean.err" || true
  RINGMASTER_FAULT='exit:rank=1:step=1050' "$BIN/ringmaster" run -f "$ROOT/deploy/examples/fashion-mnist.yaml" \
      --epochs "$EPOCHS" --checkpoint-dir "$T/ck-fault" --run-dir "$T/run-fault" -o json >"$T/fault.json" 2>"$T/fault.err" || true
  REC=$($PY - "$T" <<'PYEOF'
import glob, json, re, sys
T = sys.argv[1]
def status(p):
    try:
        return json.loads(open(p).read().strip().splitlines()[-1])["status"]
    except Exception as e:
        return {"error": str(e)}
def ts(line):
    m = re.search(r'ts=\S*T(\d+):(\d+):([\d.]+)Z', line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
logs = "".join(open(f).read() for f in sorted(glob.glob(T + "/run-fault/worker-*.log")))
fault = [ts(l) for l in logs.splitlines() if 'msg="fault injected"' in l]
seen = [ts(l) for l in logs.splitlines() if 'collective failed' in l]
rec = [float(m) for m in re.findall(r'msg="recovered" seconds=([\d.]+)', logs)]
loaded = re.findall(r'msg="checkpoint loaded".*? step=(\d+)', logs)
fnv = sorted(set(re.findall(r'params_fnv64=([0-9a-f]+)', logs)))
clean_logs = "".join(open(f).read() for f in sorted(glob.glob(T + "/run-clean/worker-*.log")))
cfnv = sorted(set(re.findall(r'params_fnv64=([0-9a-f]+)', clean_logs)))
c, f = status(T + "/clean.json"), status(T + "/fault.json")
print(json.dumps({"clean": {"phase": c.get("phase"), "result": c.get("result")},
                  "fault": {"phase": f.get("phase"), "restarts": f.get("restarts"), "result": f.get("result")},
                  "noticed_s": round(min(seen) - min(fault), 3) if fault and seen else None,
                  "recovery_s": max(rec) if rec else None,
                  "resumed_from_step": sorted(set(int(x) for x in loaded)),
                  "fnv_fault": fnv, "fnv_clean": cfnv}))
PYEOF
)
  echo "$REC"
fi

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
$PY - "$OUT" "$RM1" "$RM2" "$TORCH1" "$TORCH2" "$LIMIT" "$TDL1" "$TDL2" "$REC" "$A1" "$A2" "$IDENT" "$LOAD" "$EPOCHS" "$TARGET" <<'PYEOF'
import json, subprocess, sys, datetime
out, rm1, rm2, t1, t2, lim, d1, d2, rec = sys.argv[1], *[json.loads(x) for x in sys.argv[2:10]]
a1, a2, ident, load, epochs, target = sys.argv[10:16]
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
nproc = subprocess.run("nproc", capture_output=True, text=True).stdout.strip()
def f(x, fmt="{:.0f}"):
    return "—" if x in (None, 0) else fmt.format(x)
def ratio(a, b):
    return "—" if not a or not b else f"{a / b:.1f}×"
def acc(r):
    e = r.get("evals") or []
    return f"{e[-1]['test_accuracy']:.4f} (epoch {e[-1]['epoch']})" if e else "—"
rows = [
  ("1", rm1, t1, d1), ("2", rm2, t2, d2),
]
L = []
L.append("# Training benchmark: ringmaster-worker vs PyTorch DDP (Gloo), CPU\n")
L.append(f"- Date: {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}; machine: {nproc} cores, {cpu}; load average at the end: {load}")
L.append("- Model 784-512-256-10 (ReLU, softmax cross-entropy), batch 64 per worker, SGD momentum 0.9, lr 0.02 per 64 samples scaled by global batch/64, 1 warmup epoch, cosine; one process and one BLAS/intra-op thread per worker; 2 workers share the machine's cores.")
L.append(f"- Command: `bench/train/run.sh` (EPOCHS={epochs}, TARGET={target}); ringmaster runs {epochs} epochs, PyTorch stops when it reaches the target.")
L.append("- The machine is shared with other builds and tests while this runs: absolute numbers are noisy; the two peers ran back to back in the same script.\n")
L.append("| workers | ringmaster samples/s/worker | PyTorch (fast loop) | ratio | PyTorch (DataLoader) | ratio | ringmaster time to %s | PyTorch (fast) time to %s | ringmaster final acc | PyTorch last acc |" % (target, target))
L.append("|---|---|---|---|---|---|---|---|---|---|")
for w, r, t, d in rows:
    rs = r['samples_per_s_per_worker']
    L.append(f"| {w} | {f(rs)} | {f(t['samples_per_s_per_worker'])} | {ratio(rs, t['samples_per_s_per_worker'])} | {f(d['samples_per_s_per_worker'])} | {ratio(rs, d['samples_per_s_per_worker'])} | {f(r['time_to_target_s'], '{:.1f} s')} | {f(t['time_to_target_s'], '{:.1f} s')} | {acc(r)} | {acc(t)} |")
L.append("")
L.append("PyTorch (fast loop) indexes whole in-memory tensors per batch (no DataLoader): the strongest PyTorch baseline, it measures the step itself. PyTorch (DataLoader) is the idiomatic script (per-sample Dataset returning a float image like ToTensor, DistributedSampler, DataLoader batch 64, num_workers 0).")
L.append("")
L.append(f"Physical limit (one core): the step's eight SGEMMs alone run at {lim['gemm_gflops']} GFLOP/s "
         f"({lim['mflop_per_sample']} MFLOP/sample) = **{lim['samples_per_s_ceiling']:.0f} samples/s** per core; "
         f"ringmaster's 1-worker rate is {100 * rm1['samples_per_s_per_worker'] / lim['samples_per_s_ceiling']:.0f}% of it, "
         f"PyTorch's fast loop {100 * (t1['samples_per_s_per_worker'] or 0) / lim['samples_per_s_ceiling']:.0f}%. "
         "So no implementation of this fp32 step on one core can beat the fast PyTorch loop by more than "
         f"{lim['samples_per_s_ceiling'] / max(1, t1['samples_per_s_per_worker'] or 1):.1f}x; the issue's 5x target was set against ~1.4k samples/s PyTorch.\n")
L.append(f"Replicas bit-identical after {epochs} epochs with 2 workers (params fnv64 equal on both ranks): {ident}.\n")
L.append("## Allocations per step\n")
L.append("LD_PRELOAD counter (bench/train/malloc_count.c) over the whole process, runs that differ only in `--max-steps` (200 vs 900):")
L.append(f"- 1 worker: **{a1}** extra allocations for 700 extra steps.")
L.append(f"- 2 workers, rank 0 (ring allreduce + fusion buckets on the comm thread, `--fusion-mb 0.5`): **{a2}** extra allocations for 700 extra steps.")
L.append("- Not per step, so not counted here: the ~1/s rendezvous progress report (HTTP + JSON) when a rendezvous is used, and /metrics scrapes.\n")
if rec.get("clean"):
    cr, fr = rec["clean"].get("result") or {}, rec["fault"].get("result") or {}
    L.append("## 4 workers, kill and recover (`ringmaster run`, deploy/examples/fashion-mnist.yaml)\n")
    L.append("Checkpoints every 100 steps; the faulty run has `RINGMASTER_FAULT=exit:rank=1:step=1050` (the runner replaces the worker, survivors restart in place).\n")
    L.append("| run | phase | restarts | test accuracy | steps | seconds |")
    L.append("|---|---|---|---|---|---|")
    L.append(f"| clean | {rec['clean'].get('phase')} | 0 | {cr.get('testAccuracy')} | {cr.get('steps')} | {f(cr.get('seconds'), '{:.1f}')} |")
    L.append(f"| rank 1 killed at step 1050 | {rec['fault'].get('phase')} | {rec['fault'].get('restarts')} | {fr.get('testAccuracy')} | {fr.get('steps')} | {f(fr.get('seconds'), '{:.1f}')} |")
    L.append("")
    L.append(f"- Failure noticed by the first survivor {rec.get('noticed_s')} s after the victim's fault line; recovery (detection to first step of the new round) {rec.get('recovery_s')} s; all ranks resumed from step(s) {rec.get('resumed_from_step')} (at most one interval redone).")
    L.append(f"- Final parameter checksums: faulty run {rec.get('fnv_fault')}, clean run {rec.get('fnv_clean')} (one value each = replicas bit-identical; equal across runs = the restart changed nothing).")
    if rm1.get("final"):
        L.append(f"- 4 workers vs 1 worker after {epochs} epochs: {cr.get('testAccuracy')} vs {rm1['final']['test_accuracy']} (the linear LR rule with warmup).\n")
L.append("## Per-epoch test accuracy\n")
for name, r in (("ringmaster 1 worker", rm1), ("ringmaster 2 workers", rm2), ("PyTorch 1 worker", t1), ("PyTorch 2 workers", t2)):
    L.append(f"- {name}: " + ", ".join(f"e{e['epoch']} {e['test_accuracy']:.4f} @{e['seconds']}s" for e in r.get('evals') or []))
open(out, "w").write("\n".join(L) + "\n")
print("wrote", out)
PYEOF
cat "$OUT"
