#!/usr/bin/env bash
# bench/e2e/run.sh — wall time of the example job end to end, ringmaster vs PyTorch DDP.
#   ringmaster: `bin/ringmaster run -f deploy/examples/fashion-mnist.yaml -o json` (4 worker
#               processes, ring allreduce over loopback TCP, C + OpenBLAS 1 thread each)
#   peer:       the same job in PyTorch (bench/e2e/ddp_fashion_mnist.py: DDP, Gloo, 4 processes,
#               env:// rendezvous, launched torchrun-style by bench/e2e/launch.py, 1 thread each)
# Wall time = process start to exit, including start-up and data loading. Prints one JSON line per
# run. Usage: bench/e2e/run.sh [REPS=1] [EPOCHS=10]   (~2 min per rep on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${RM_BIN:-$root/bin}"
reps="${1:-1}"
epochs="${2:-10}"
work=$(mktemp -d "${TMPDIR:-/tmp}/rm-e2e-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
for r in $(seq 1 "$reps"); do
  t0=$(now)
  "$bin/ringmaster" run -f "$root/deploy/examples/fashion-mnist.yaml" --epochs "$epochs" \
     --checkpoint-dir "$work/ck" --run-dir "$work/run-$r" -o json >"$work/rm.json" 2>"$work/rm.err"
  t1=$(now)
  tail -n 1 "$work/rm.json" | /usr/bin/python3 -c "
import json,sys; j=json.load(sys.stdin); r=j['status']['result']
print(json.dumps({'peer':'ringmaster','rep':$r,'epochs':$epochs,'wallSeconds':round($t1-$t0,2),
  'trainSeconds':round(r['seconds'],2),'testAccuracy':r['testAccuracy'],'samplesPerSecond':round(r['samplesPerSecond'],1)}))"
  t0=$(now)
  /usr/bin/python3 "$root/bench/e2e/launch.py" --nproc 4 "$root/bench/e2e/ddp_fashion_mnist.py" \
     --epochs "$epochs" >"$work/ddp.json" 2>"$work/ddp.err"
  t1=$(now)
  tail -n 1 "$work/ddp.json" | /usr/bin/python3 -c "
import json,sys; j=json.load(sys.stdin); j['rep']=$r; j['wallSeconds']=round($t1-$t0,2); print(json.dumps(j))"
done
