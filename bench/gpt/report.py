#!/usr/bin/python3
"""bench/gpt/report.py - the helpers of bench/gpt/run.sh (no torch needed):

  spec BASE OUT NAME [path=value ...]   BASE (YAML/JSON TrainingJob) with metadata.name = NAME and each
                                        dotted path set to its value (parsed as YAML; "path=" deletes), as JSON
  torch-args SPEC                       the bench/gpt/torch_gpt.py flags that make the peer train what SPEC trains
  shape SPEC                            "layers heads embed context batch" of SPEC's model
  rm-run NAME STDOUT RUNDIR D           one `ringmaster run`'s summary as a JSON line (D: data-parallel width)
  llmc NAME LOG THREADS B T             one llm.c run's summary as a JSON line
  markdown RAW OUT                      bench/results/gpt.md from the JSON lines under RAW (and the loss plot)
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import yaml

KV = re.compile(r'(\w+)=("[^"]*"|\S+)')


def kv(line):
    return {k: v.strip('"') for k, v in KV.findall(line)}


def num(x, default=None):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


# ---- specs
def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def cmd_spec(base, out, name, *sets):
    d = load(base)
    d.setdefault("metadata", {})["name"] = name
    for s in sets:
        path, _, val = s.partition("=")
        keys = path.split(".")
        o = d
        for k in keys[:-1]:
            o = o.setdefault(k, {})
        if val == "":
            o.pop(keys[-1], None)
        else:
            o[keys[-1]] = yaml.safe_load(val)
    with open(out, "w") as f:
        json.dump(d, f, indent=1)


def training(spec):
    return load(spec)["spec"]["training"]


def cmd_torch_args(spec):
    t = training(spec)
    m, o = t.get("model", {}), t.get("optimizer", {})
    args = []
    for k in ("layers", "heads", "embed", "context"):
        if k in m:
            args += [f"--{k}", str(m[k])]
    args += ["--optimizer", "adam" if o.get("type") == "adam" else "adamw", "--lr", str(o.get("lr", 1e-3)), "--beta1", str(o.get("beta1", 0.9)),
             "--beta2", str(o.get("beta2", 0.99)), "--weight-decay", str(o.get("weightDecay", 0.0)),
             "--grad-clip", str(t.get("gradClip", 0))]
    print(" ".join(args))


def cmd_shape(spec):
    t = training(spec)
    m = t.get("model", {})
    print(m.get("layers", 4), m.get("heads", 4), m.get("embed", 128), m.get("context", 64),
          t.get("batchSizePerWorker", 12))


# ---- one ringmaster run
def ts(line):
    m = re.search(r'ts=\S*T(\d+):(\d+):([\d.]+)Z', line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def cmd_rm_run(name, stdout, rundir, D):
    D = int(D)
    st = {}
    try:
        lines = [ln for ln in open(stdout).read().splitlines() if ln.strip().startswith("{")]
        st = json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        pass
    spec, status = st.get("spec", {}), st.get("status", {})
    tr = spec.get("training", {})
    T = (tr.get("model") or {}).get("context", 64)
    B = tr.get("batchSizePerWorker", 12)
    logs = sorted(glob.glob(os.path.join(rundir, "worker-*.log")),
                  key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0))
    secs, steps, rates, mem, evals = [], [], [], [], []
    for i, path in enumerate(logs):
        t0 = None
        prog = []
        for line in open(path, errors="replace"):
            if 'msg="round ready"' in line and t0 is None:
                t0 = ts(line)
            if 'msg="progress"' in line:
                k = kv(line)
                r = num(k.get("tokens_per_s"))
                if r is None and num(k.get("samples_per_s")) is not None:
                    r = num(k["samples_per_s"]) * T  # a sample of a text model is one sequence
                if r is not None:
                    prog.append(r)
            elif 'msg="training done"' in line:
                k = kv(line)
                secs.append(num(k.get("seconds"), 0))
                steps.append(int(num(k.get("steps"), 0)))
            elif 'msg="memory"' in line:
                mem.append(kv(line))
            elif 'msg="evaluation"' in line and i == 0:
                k = kv(line)
                v = num(k.get("val_loss", k.get("valLoss", k.get("test_loss"))))
                if v is not None:
                    el = ts(line) - t0 if t0 is not None and ts(line) is not None else None
                    evals.append({"step": int(num(k.get("step"), -1)), "val_loss": v,
                                  "elapsed_s": round(el, 2) if el is not None else None})
        if i == 0:
            rates = prog[1:] if len(prog) > 1 else prog  # the first window holds the start-up
    sev = (status.get("progress") or {}).get("evaluations") or []
    if any("valLoss" in e for e in sev):  # the status is the record; the log gives the times
        at = {e["step"]: e["elapsed_s"] for e in evals}
        evals = [{"step": e.get("step"), "val_loss": e["valLoss"], "elapsed_s": at.get(e.get("step"))}
                 for e in sev if "valLoss" in e]
    res = status.get("result") or {}
    smax = max(secs) if secs else num(res.get("seconds"), 0)
    n = max(steps) if steps else int(num(res.get("steps"), 0) or 0)
    tps = statistics.median(rates) if rates else None
    if tps is None and smax:
        tps = n * B * T / smax
    if tps is None and res.get("tokensPerSecond"):
        tps = num(res["tokensPerSecond"])

    def mx(key):
        v = [num(m.get(key), 0) for m in mem]
        return max(v) if v else None

    out = {"name": name, "phase": status.get("phase"), "replicas": spec.get("replicas"), "D": D,
           "steps": n, "seconds": smax, "step_ms": round(1000 * smax / n, 2) if n and smax else None,
           "tokens_per_s_worker": round(tps, 1) if tps else None,
           "tokens_per_s_global": round(D * B * T * n / smax, 1) if n and smax else None,
           "val_loss": res.get("valLoss"), "peak_rss_bytes": mx("peak_rss_bytes") or res.get("peakRssBytes"),
           "params_bytes": mx("params_bytes"), "grads_bytes": mx("grads_bytes"),
           "optimizer_bytes": mx("optimizer_bytes"), "activations_bytes": mx("activations_bytes"),
           "evals": evals, "B": B, "T": T}
    print(json.dumps(out))


def cmd_llmc(name, log, threads, B, T):
    ms = [float(m) for m in re.findall(r"step \d+: train loss [\d.]+ \(took ([\d.]+) ms\)", open(log).read())]
    ms = ms[1:] if len(ms) > 1 else ms
    med = statistics.median(ms) if ms else None
    print(json.dumps({"peer": "llm.c", "model": name, "threads": int(threads), "steps": len(ms),
                      "step_ms": round(med, 2) if med else None,
                      "tokens_per_s": round(int(B) * int(T) * 1000 / med, 1) if med else None}))


# ---- the report
def jl(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def f(x, fmt="{:.0f}"):
    return "—" if x is None else fmt.format(x)


def mib(x):
    return "—" if not x else f"{x / 2**20:.1f}"


SHAPES = {"baby": (4, 4, 128, 64, 12), "small": (6, 6, 384, 256, 12)}


def flops_per_step(model):
    L, H, C, T, B = SHAPES[model]
    N = L * (12 * C * C + 13 * C) + 256 * C + 2 * C  # without wpe (nanoGPT's non-embedding count)
    return (6 * N + 12 * L * C * T) * B * T


def cmd_markdown(raw, out):
    meta = json.load(open(os.path.join(raw, "meta.json"))) if os.path.exists(os.path.join(raw, "meta.json")) else {}
    skips = open(os.path.join(raw, "skips.txt")).read().splitlines() if os.path.exists(os.path.join(raw, "skips.txt")) else []
    peak = jl(os.path.join(raw, "peak.jsonl"))
    speed = jl(os.path.join(raw, "speed.jsonl"))
    scale = jl(os.path.join(raw, "scale.jsonl"))
    qt = jl(os.path.join(raw, "quality_torch.jsonl"))
    qr = jl(os.path.join(raw, "quality_rm.jsonl"))
    L = []
    L.append("# GPT (`model.type: gpt`): ringmaster vs PyTorch 1.13 and llm.c, and the SGEMM limit, CPU\n")
    L.append(f"- Date: {meta.get('date', '?')}; machine: {meta.get('nproc', '?')} cores, {meta.get('cpu', '?')}; "
             f"load average at the start {meta.get('load_start', '?')}, at the end {meta.get('load_end', '?')}.")
    L.append(f"- Command: `{meta.get('command', 'bench/gpt/run.sh')}`; PyTorch {meta.get('torch', '?')}; "
             "method, formulas and caveats in the GPT notes (bench/notes/gpt.md).")
    if meta.get("quick"):
        L.append("- **QUICK=1 smoke run**: a few steps and short timings per point; these numbers test the "
                 "script, they are not measurements.")
    L.append("- The machine may be shared with builds and tests while this runs; every peer ran in the same "
             "script, interleaved, best of the repetitions.\n")
    fma = {r["threads"]: r["gflops"] for r in peak if r.get("kind") == "fma_peak"}
    gem = [r for r in peak if r.get("kind") == "gemm"]
    libs = sorted({r["lib"] for r in gem})

    def gemm_step_ms(model, lib, th):
        rows = [r for r in gem if r["model"] == model and r["lib"] == lib and r["threads"] == th]
        if not rows:
            return None
        return sum(r["count"] * r["us_per_call"] for r in rows) / 1000

    # -- throughput
    L.append("## Training throughput (tokens/s, one process)\n")
    if speed:
        L.append("FLOPs per step = (6·N + 12·L·C·T)·B·T (nanoGPT `estimate_mfu`, PaLM appendix B; N without the "
                 "position embedding). Batch B = 12 sequences. ringmaster: `ringmaster run` with 1 worker (one BLAS "
                 "thread); PyTorch: `torch.set_num_threads(1)` and `(2)`; llm.c: `OMP_NUM_THREADS` 1 and 2. The "
                 "GEMM-only ceiling is the step's matrix products alone at the best library's measured one-thread "
                 "speed (table below): no fp32 implementation on one core gets past it without fewer FLOPs.\n")
        L.append("| model | FLOP/step | peer | threads | tokens/s | step ms | GFLOP/s | % of the 1-thread GEMM ceiling |")
        L.append("|---|---|---|---|---|---|---|---|")
        for model in ("baby", "small"):
            rows = [r for r in speed if r.get("model") == model]
            if not rows:
                continue
            fl = flops_per_step(model)
            _, _, _, T, B = SHAPES[model]
            ceil = [gemm_step_ms(model, lib, 1) for lib in libs]
            ceil = [c for c in ceil if c]
            ceil_tps = B * T / (min(ceil) / 1000) if ceil else None
            best = {}
            for r in rows:
                if r.get("threads") == "best" or r.get("tokens_per_s") is None:
                    continue
                k = (r["peer"], r["threads"])
                best[k] = max(best.get(k, 0), r["tokens_per_s"])
            for (peer, th), tps in sorted(best.items(), key=lambda x: (x[0][0] != "ringmaster", x[0])):
                L.append(f"| {model} | {fl / 1e9:.2f} G | {peer} | {th} | {tps:.0f} | {1000 * B * T / tps:.1f} | "
                         f"{fl * tps / (B * T) / 1e9:.1f} | {f(100 * tps / ceil_tps if ceil_tps else None, '{:.0f}%')} |")
            if ceil_tps:
                L.append(f"| {model} | {fl / 1e9:.2f} G | GEMM-only ceiling (1 thread) | 1 | {ceil_tps:.0f} | "
                         f"{1000 * B * T / ceil_tps:.1f} | — | 100% |")
        L.append("")
        for model in ("baby", "small"):
            def best_of(peer, th):
                v = [r["tokens_per_s"] for r in speed if r.get("peer") == peer and r.get("model") == model
                     and r.get("threads") == th and r.get("tokens_per_s")]
                return max(v) if v else None
            rmv, pt1, pt2 = best_of("ringmaster", 1), best_of("pytorch", 1), best_of("pytorch", 2)
            if rmv and pt1:
                L.append(f"- {model}: ringmaster 1 worker / PyTorch 1 thread = **{rmv / pt1:.2f}×**"
                         + (f"; / PyTorch 2 threads = {rmv / pt2:.2f}×" if pt2 else "") + ".")
        L.append("")
    else:
        L.append("Not run.\n")
    # -- GEMM table
    L.append("## SGEMM at the transformer's shapes (the physical limit)\n")
    if gem:
        L.append("GFLOP/s of one `sgemm` call (best of 3 timed trials), row-major, weights stored [in, out] (GPT-2 "
                 "Conv1D layout). m×n×k; `count` = calls per training step. FMA peak of one core (12 independent "
                 f"8-wide FMA chains): {f(fma.get(1), '{:.1f}')} GFLOP/s; two threads {f(fma.get(2), '{:.1f}')}.\n")
        ths = sorted({r["threads"] for r in gem})
        for model in ("baby", "small"):
            rows = [r for r in gem if r["model"] == model]
            if not rows:
                continue
            Lh, Hh, C, T, B = SHAPES[model]
            L.append(f"### {model}: {Lh} layers, {Hh} heads, embed {C}, context {T}, batch {B} (rows {B * T})\n")
            cols = [(lib, th) for th in ths for lib in libs]
            L.append("| op | form | m×n×k | count | " + " | ".join(f"{lib} {th}t" for lib, th in cols) + " |")
            L.append("|---|---|---|---|" + "---|" * len(cols))
            keyed = {(r["op"], r["form"], r["lib"], r["threads"]): r for r in rows}
            seen = []
            for r in rows:
                k = (r["op"], r["form"])
                if k in seen:
                    continue
                seen.append(k)
                vals = [keyed.get((r["op"], r["form"], lib, th)) for lib, th in cols]
                best = max((v["gflops"] for v in vals if v), default=0)
                cells = []
                for v in vals:
                    if not v:
                        cells.append("—")
                    else:
                        s = f"{v['gflops']:.1f}"
                        cells.append(f"**{s}**" if v["gflops"] == best else s)
                L.append(f"| {r['op']} | {r['form']} | {r['m']}×{r['n']}×{r['k']} | {r['count']} | " + " | ".join(cells) + " |")
            stepms = [gemm_step_ms(model, lib, th) for lib, th in cols]
            L.append("| **one step's GEMMs, ms** | | | | " + " | ".join(f(x, "{:.2f}") for x in stepms) + " |")
            fl_g = sum(2.0 * r["m"] * r["n"] * r["k"] * r["count"] for r in rows if r["lib"] == libs[0] and r["threads"] == ths[0])
            L.append("| **→ GFLOP/s over the step** | | | | " + " | ".join(f(fl_g / (x / 1000) / 1e9 if x else None, "{:.1f}") for x in stepms) + " |")
            L.append("")
        # recommendation: the library with the least GEMM time per step on one thread (the worker's setting)
        rec = []
        for model in ("baby", "small"):
            t1 = {lib: gemm_step_ms(model, lib, 1) for lib in libs}
            t1 = {k: v for k, v in t1.items() if v}
            if t1:
                b = min(t1, key=t1.get)
                rec.append(f"{model}: **{b}** ({t1[b]:.2f} ms of GEMMs per step on one thread; " +
                           ", ".join(f"{k} {v:.2f}" for k, v in sorted(t1.items()) if k != b) + ")")
        if rec:
            L.append("Least GEMM time per step on one thread (the worker runs one BLAS thread per process): " + "; ".join(rec) + ".\n")
    else:
        L.append("Not run.\n")
    # -- quality
    L.append("## Validation loss over training (2 workers × 12 vs PyTorch batch 24)\n")
    if qt or qr:
        L.append("Constant lr, the spec's optimizer on both sides (PyTorch gets it from `report.py torch-args`), global batch 24 sequences of 64 bytes. "
                 "Validation: mean cross-entropy (nats per byte) over the last 10% of tinyshakespeare; PyTorch on "
                 "every non-overlapping window of it, ringmaster on its own validation pass. elapsed: wall "
                 "seconds since the first step, evaluations included. nanoGPT's CPU baby GPT reaches ≈1.88 "
                 "(65-character vocabulary, batch 12, cosine, 2,000 iterations).\n")
        te = {e["step"]: e for e in (qt[-1]["evals"] if qt else [])}
        re_ = {e["step"]: e for e in (qr[-1]["evals"] if qr else [])}
        L.append("| step | ringmaster val loss | elapsed s | PyTorch val loss | elapsed s |")
        L.append("|---|---|---|---|---|")
        for s in sorted(set(te) | set(re_)):
            a, b = re_.get(s, {}), te.get(s, {})
            L.append(f"| {s} | {f(a.get('val_loss'), '{:.4f}')} | {f(a.get('elapsed_s'), '{:.1f}')} | "
                     f"{f(b.get('val_loss'), '{:.4f}')} | {f(b.get('elapsed_s'), '{:.1f}')} |")
        L.append("")
        if os.path.exists(os.path.join(os.path.dirname(out), "gpt-loss.png")):
            L.append("Plot: bench/results/gpt-loss.png (validation loss against step and against seconds).\n")
    else:
        L.append("Not run.\n")
    # -- scaling
    L.append("## Scaling on the baby GPT (ringmaster run, batch 12 per data-parallel replica)\n")
    if scale:
        base = next((r for r in scale if r["name"] == "dp1" and r.get("tokens_per_s_global")), None)
        L.append("Global tokens/s = data-parallel replicas × 12 × 64 × steps / the slowest worker's training "
                 "seconds; efficiency = global tokens/s / (workers × 1 worker's). Memory: the largest rank's "
                 "(log line `memory`). Workers share this machine's cores: beyond its core count the "
                 "processes take turns, and the table measures that.\n")
        L.append("| config | workers | phase | steps | step ms | tokens/s global | per worker | efficiency | peak RSS MiB | params MiB | grads MiB | optimizer MiB |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in scale:
            w = r.get("replicas") or 0
            g = r.get("tokens_per_s_global")
            eff = g / (w * base["tokens_per_s_global"]) if base and g and w else None
            L.append(f"| {r['name']} | {w} | {r.get('phase')} | {r.get('steps')} | {f(r.get('step_ms'), '{:.1f}')} | "
                     f"{f(g)} | {f(g / w if g and w else None)} | {f(100 * eff if eff else None, '{:.0f}%')} | "
                     f"{mib(r.get('peak_rss_bytes'))} | {mib(r.get('params_bytes'))} | {mib(r.get('grads_bytes'))} | "
                     f"{mib(r.get('optimizer_bytes'))} |")
        L.append("")
    else:
        L.append("Not run.\n")
    if skips:
        L.append("## Skipped\n")
        groups = {}  # one line per reason, naming the runs it stopped
        for s in skips:
            name, sep, why = s.partition(": ")
            if not sep or " " in name:
                name, why = None, s
            why = re.sub(r"^`ringmaster validate` refuses it: [\w.-]+\.json:", "`ringmaster validate` refuses the spec: line ", why)
            groups.setdefault(why, []).append(name)
        for why, names in groups.items():
            runs = [n for n in names if n]
            L.append(f"- {why}" + (f" ({', '.join(runs)})" if runs else ""))
        L.append("")
    with open(out, "w") as fh:
        fh.write("\n".join(L))
    print("wrote", out)


def cmd_plot(raw, png):
    """gnuplot: validation loss vs step and vs seconds, both peers; an ASCII table stays in gpt.md."""
    qt = jl(os.path.join(raw, "quality_torch.jsonl"))
    qr = jl(os.path.join(raw, "quality_rm.jsonl"))
    if not shutil.which("gnuplot") or not (qt or qr):
        return
    series = []
    for name, q in (("ringmaster 2 workers", qr), ("PyTorch batch 24", qt)):
        if q and q[-1].get("evals"):
            p = os.path.join(raw, name.split()[0] + ".dat")
            with open(p, "w") as fh:
                for e in q[-1]["evals"]:
                    fh.write(f"{e['step']} {e['val_loss']} {e.get('elapsed_s') if e.get('elapsed_s') is not None else 'NaN'}\n")
            series.append((name, p))
    if not series:
        return
    g = ["set terminal png size 1000,420", f"set output '{png}'", "set multiplot layout 1,2",
         "set grid", "set ylabel 'validation loss (nats/byte)'", "set xlabel 'step'",
         "plot " + ", ".join(f"'{p}' using 1:2 with linespoints title '{n}'" for n, p in series),
         "set xlabel 'seconds'",
         "plot " + ", ".join(f"'{p}' using 3:2 with linespoints title '{n}'" for n, p in series),
         "unset multiplot"]
    subprocess.run(["gnuplot"], input="\n".join(g), text=True, check=False)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"spec": cmd_spec, "torch-args": cmd_torch_args, "shape": cmd_shape, "rm-run": cmd_rm_run,
     "llmc": cmd_llmc, "markdown": cmd_markdown, "plot": cmd_plot}[cmd](*args)


if __name__ == "__main__":
    main()
