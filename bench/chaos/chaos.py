#!/usr/bin/env python3
"""The chaos soak's pure parts (bench/chaos/run.sh runs the jobs): drawing a job's faults, checking
that no acknowledged checkpoint was lost, and the report (docs/strategies.md#failure-semantics).

  chaos.py faults KIND SEED JOB MAXK STEPS VERSIONS [PSHANGS]
      one line: RINGMASTER_FAULT value (may be empty) | external stops (may be empty)
      | worker faults in RINGMASTER_FAULT | server faults
  chaos.py check RUNDIR        prints one line per lost checkpoint; exit 1 when any
  chaos.py report JOBSFILE OUT KEY=VALUE...
"""
import glob
import os
import random
import re
import sys

KINDS = ("allreduce", "pipeline", "ps")


def faults(kind, seed, job, maxk, steps, versions, ps_hangs):
    """Faults for one job, all of which fire during the run: in-process ones (RINGMASTER_FAULT, at a
    step or a server version) and stops (SIGSTOP of a process by the script, once its log shows the
    given number of checkpoints). Worker faults restart the group; server faults must not."""
    r = random.Random(seed * 100003 + job * 7 + KINDS.index(kind))
    k = r.randint(1, maxk)
    spec, stops, wf, sf = [], [], 0, 0
    used = set()
    for _ in range(k):
        kinds = ["exit", "exit", "hang", "stop"]
        if kind == "ps":
            kinds += ["ps-exit", "ps-exit"] + (["ps-hang", "ps-stop"] if ps_hangs else [])
        what = r.choice(kinds)
        if what.startswith("ps-"):
            idx = r.randint(0, 1)
            if what == "ps-stop":  # counted by run.sh once it fired
                stops.append(f"ps:{idx}:{r.randint(1, 5)}")
            else:
                v = r.randrange(1, versions)
                while (idx, v) in used:
                    v += 1
                used.add((idx, v))
                spec.append(f"{what[3:]}:role=ps:index={idx}:step={v}")
                sf += 1
        elif what == "stop":  # counted by run.sh once it fired
            stops.append(f"worker:{r.randint(0, 1)}:{r.randint(1, 5) if kind == 'ps' else r.randint(2, 20)}")
        else:
            s = r.randrange(1, steps)
            while s in used:
                s += 1
            used.add(s)
            spec.append(f"{what}:rank={r.randint(0, 1)}:step={s}")
            wf += 1
    return ";".join(spec), " ".join(stops), wf, sf


TS = re.compile(r"^ts=(\S+) ")


def kv(line, key):
    m = re.search(r"\b" + key + r"=(-?\d+)", line)
    return int(m.group(1)) if m else None


def check(rundir):
    """An acknowledged checkpoint is one every writing rank logged as written ("checkpoint written",
    after the rename; a sharded one once its manifest is complete); every later "checkpoint loaded"
    must be at that step or newer. A restarted server must restore at least the newest version
    every server had written (the servers' rollback rule), never start over below it."""
    bad = []
    written = {}  # step -> {rank: ts}
    loads = []
    for f in sorted(glob.glob(os.path.join(rundir, "worker-*.log"))):
        rank = int(re.search(r"worker-(\d+)\.log$", f).group(1))
        for line in open(f, errors="replace"):
            m = TS.match(line)
            if not m:
                continue
            if 'msg="checkpoint written"' in line:
                written.setdefault(kv(line, "step"), {}).setdefault(rank, m.group(1))
            elif 'msg="checkpoint loaded"' in line:
                loads.append((m.group(1), kv(line, "step"), rank))
    writers = {r for w in written.values() for r in w}
    acked = sorted((max(w.values()), s) for s, w in written.items() if set(w) == writers)
    for ts, step, rank in loads:
        before = [s for t, s in acked if t < ts]
        if before and step < max(before):
            bad.append(f"rank {rank} loaded step {step} at {ts} after step {max(before)} was acknowledged")
    # servers (docs/strategies.md#failure-semantics): after a server dies every server rolls back to
    # the newest version all shards checkpointed, so a restart must restore at least the version
    # every server had written before it (none written by all: version 0 is right)
    srv = {}
    for f in sorted(glob.glob(os.path.join(rundir, "ps-*.log"))):
        name = os.path.basename(f)
        incs, wr = [], []  # incarnations: [first ts, restored version or None]; writes: (ts, version)
        for line in open(f, errors="replace"):
            if line.startswith("===") and "incarnation" in line:
                incs.append([None, None])
                continue
            m = TS.match(line)
            if not m or not incs:
                continue
            if incs[-1][0] is None:
                incs[-1][0] = m.group(1)
            if 'msg="shard restored"' in line and incs[-1][1] is None:
                incs[-1][1] = kv(line, "version")
            elif 'msg="shard checkpoint written"' in line:
                wr.append((m.group(1), kv(line, "version") or 0))
        srv[name] = (incs, wr)

    def common_before(ts):
        sets = [{v for t, v in wr if t < ts} for _, wr in srv.values()]
        both = set.intersection(*sets) if sets else set()
        return max(both) if both else 0

    for name, (incs, _) in srv.items():
        for k, (ts, v) in enumerate(incs[1:], start=2):
            if ts is None:
                continue
            need = common_before(ts)
            got = v if v is not None else 0
            if got < need:
                bad.append(f"{name}: incarnation {k} " + (f"restored version {v}" if v is not None else "started without its shard")
                           + f" after version {need} was written by every server")
    for b in bad:
        print(b)
    return 1 if bad else 0


def pct(xs, p):
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def report(jobsfile, out, meta):
    # job rc phase steps expected kind worker_faults server_faults stops_fired restarts lost recs faults
    rows = [l.rstrip("\n").split("\t") for l in open(jobsfile) if l.strip()]
    lines = ["## Chaos soak (`ringmaster run`: allreduce, pipeline stages, parameter servers)", "",
             f"`{meta['cmd']}`: {len(rows)} jobs one after another in {meta['secs']} s on {meta['ncpu']} CPUs "
             f"(load average {meta['load0']} at the start, {meta['load1']} at the end; time limit {meta['limit']} s "
             f"a job; seed {meta['seed']}). Each job is bench/chaos/job.yaml (2 workers, allreduce), "
             "pipeline.yaml (2 stages) or ps.yaml (2 servers, 2 async workers; 8 epochs, the others 3), checkpoints every 10 "
             f"steps, with 1–{meta['maxk']} faults: worker kills (`_exit(137)`) and hangs at random steps, "
             "SIGSTOP of a worker once it has written a random number of checkpoints, and for parameter servers "
             "kills (and, where servers have the progress deadline, hangs and SIGSTOP) at random versions.", "",
             "| job kind | jobs | completed (all steps) | failed | stuck | worker faults | server faults | "
             "restarts | lost acknowledged checkpoints | recovery p50 | p99 | max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind in KINDS + ("all",):
        rs = [r for r in rows if kind == "all" or r[5] == kind]
        if not rs:
            continue
        done = [r for r in rs if r[2] == "Succeeded" and r[3] == r[4]]
        stuck = [r for r in rs if r[2] == "stuck"]
        rec = sorted(float(x) for r in rs if r[11] != "none" for x in r[11].split(",") if x)
        name = f"**{kind}**" if kind == "all" else kind
        lines.append(f"| {name} | {len(rs)} | {len(done)} | {len(rs) - len(done) - len(stuck)} | {len(stuck)} | "
                     f"{sum(int(r[6]) for r in rs)} | {sum(int(r[7]) for r in rs)} | "
                     f"{sum(int(r[9]) for r in rs)} | {sum(int(r[10]) for r in rs)} | "
                     f"{pct(rec, 50):.2f} s | {pct(rec, 99):.2f} s | {(rec[-1] if rec else float('nan')):.2f} s |")
    lines.append("")
    mism = [r for r in rows if r[5] != "ps" and r[2] == "Succeeded" and r[6] != r[9]]
    if mism:
        lines.append(f"{len(mism)} completed allreduce/pipeline jobs counted restarts other than their worker "
                     "faults: " + ", ".join(f"job {r[0]} ({r[6]} faults, {r[9]} restarts)" for r in mism[:10])
                     + " (logs kept in bench/results/raw/chaos-job-N-restarts*.txt)")
        lines.append("")
    for r in rows:
        if r[2] != "Succeeded" or r[3] != r[4] or r[10] != "0":
            lines.append(f"- job {r[0]} ({r[5]}): {r[2]}, steps {r[3]}/{r[4]}, exit {r[1]}, lost {r[10]}, "
                         f"faults `{r[12]}` (logs kept in bench/results/raw/chaos-job-{r[0]}-*.txt)")
    lines.append("Restarts count group restarts (a worker's fault restarts the group; a server's replacement is "
                 "not a restart). Recovery = the runner's measure, failure detected → the re-formed group's "
                 "first report. Lost = a restore older than a checkpoint every writer had acknowledged "
                 "(bench/chaos/chaos.py check).")
    open(out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "faults":
        kind, seed, job, maxk, steps, versions = sys.argv[2], *map(int, sys.argv[3:8])
        ps_hangs = len(sys.argv) > 8 and sys.argv[8] == "1"
        spec, stops, wf, sf = faults(kind, seed, job, maxk, steps, versions, ps_hangs)
        print(f"{spec}|{stops}|{wf}|{sf}")
    elif cmd == "check":
        sys.exit(check(sys.argv[2]))
    elif cmd == "report":
        report(sys.argv[2], sys.argv[3], dict(a.split("=", 1) for a in sys.argv[4:]))
    else:
        sys.exit(f"chaos.py: unknown command {cmd}")
