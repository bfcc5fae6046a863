#!/usr/bin/env bash
# bench/gpu/run.sh — the GPU benchmarks (docs/architecture.md#performance-stance), side by side,
# written to bench/results/gpu.md.
#
#   1. training step time, bf16, ringmaster (bench/gpu/step_bench.c: the worker's model through the
#      CUDA kernels table) vs PyTorch eager+autocast and torch.compile (bench/gpu/torch_step.py),
#      for the Fashion-MNIST MLP (784-512-256-10, batch 64 and 512) and a wide MLP (8 hidden layers
#      of 8192, batch 8192);
#   2. the practical ceiling: a plain cuBLAS bf16 GEMM 8192^3 (bench/gpu/gemm_ceiling.c);
#   3. one-rank NCCL: raw ncclAllReduce vs ringmaster's backend vs the fusion path
#      (bench/gpu/nccl_bench.c), plus `ringmaster-worker bench --backend nccl` in nccl-tests' format.
# Without a GPU it prints "SKIP: no GPU present (...)" and exits 0, leaving the results file alone.
# Env: RM_BIN (default bin/), PYTHON (a python with torch >= 2 and CUDA), CUDA_HOME, PEAK_TFLOPS
# (dense bf16 peak for the % column; default 989 = H100 SXM; H200 has the same 989),
# STEPS (default 100), RM_PREBUILT=DIR (run bench/gpu/bundle.sh's binaries, build nothing),
# BUILD_ONLY=1 (build and stop).
set -euo pipefail
unset RINGMASTER_CUDA_SYNC_CHECK   # a debug mode: it would time synchronisations, not kernels
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
RM_BIN=${RM_BIN:-$root/bin}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PEAK=${PEAK_TFLOPS:-989}
STEPS=${STEPS:-100}
out=build/bench-gpu
res=bench/results/gpu.md
mkdir -p "$out" bench/results

bins=$out
if [ -n "${RM_PREBUILT:-}" ]; then   # bench/gpu/bundle.sh's binaries (the device machine builds nothing)
  bins=$RM_PREBUILT
else
  make -s WERROR=1 all >/dev/null
  if [ "$(make -s info | sed -n 's/.*cuda=\([01]\).*/\1/p')" != 1 ]; then
    echo "SKIP: no GPU present (built without CUDA)"; exit 0
  fi
  libs=$(make -s --no-print-directory --eval 'rm-print-libs: ; @echo $(LIBS)' rm-print-libs)
  for p in step_bench nccl_bench gemm_ceiling tf_bench; do
    cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wno-unused-parameter -I. -I"$CUDA_HOME/include" \
       -DRM_HAVE_CUDA=1 -pthread "bench/gpu/$p.c" -o "$out/$p" \
       build/release/libworker.a build/release/libkernels.a build/release/libcommon.a $libs
  done
  echo "built $out/{step_bench,nccl_bench,gemm_ceiling,tf_bench}"
fi
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: no GPU present (nvidia-smi -L lists no GPU); $res left unchanged"; exit 0
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
py=${PYTHON:-}
if [ -z "$py" ]; then
  for cand in python3 /usr/bin/python3; do
    if "$cand" -c 'import torch,sys; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 and torch.cuda.is_available() else 1)' 2>/dev/null; then
      py=$cand; break
    fi
  done
fi
torchver=$([ -n "$py" ] && "$py" -c 'import torch; print(torch.__version__)' || echo "none")

log=$out/results.log
: >"$log"
run() { echo "+ $*" | tee -a "$log"; "$@" 2>&1 | tee -a "$log"; }

# name hidden batch
cases=("fmnist-b64 512,256 64" "fmnist-b512 512,256 512" "wide-8x8192 8192,8192,8192,8192,8192,8192,8192,8192 8192")
for c in "${cases[@]}"; do
  read -r name hidden batch <<<"$c"
  st=$STEPS; [ "$batch" -ge 8192 ] && st=$(( STEPS / 5 > 10 ? STEPS / 5 : 10 ))
  run "$bins/step_bench" --name "$name" --hidden "$hidden" --batch "$batch" --precision bf16 --steps "$st" --warmup 10
  if [ -n "$py" ]; then
    run "$py" bench/gpu/torch_step.py --name "$name" --hidden "$hidden" --batch "$batch" --precision bf16 --steps "$st" --warmup 10
  else
    echo "RESULT impl=torch-eager name=$name error=no-torch-with-cuda" | tee -a "$log"
  fi
done
run "$bins/gemm_ceiling" --size 8192 --iters 50
run "$bins/nccl_bench" --iters 50
run timeout 300 "$RM_BIN/ringmaster-worker" bench --backend nccl -b 8 -e 256M -f 8 -n 20 -w 5 -c 1 || true

# ---- results file ------------------------------------------------------------------------------
get() { # get IMPL NAME FIELD
  grep "^RESULT impl=$1 name=$2 " "$log" | tail -n1 | tr ' ' '\n' | sed -n "s/^$3=//p"; }
ceil=$(grep '^RESULT kind=gemm out=bf16' "$log" | tail -n1 | tr ' ' '\n' | sed -n 's/^tflops=//p')
ceil32=$(grep '^RESULT kind=gemm out=fp32' "$log" | tail -n1 | tr ' ' '\n' | sed -n 's/^tflops=//p')
{
  echo "# GPU benchmarks"
  echo
  echo "- Device: $gpu, driver $driver; $(nproc) CPU cores ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1))"
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ); PyTorch $torchver ($py); CUDA $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "- Command: \`bench/gpu/run.sh\` (raw log: $log)"
  echo
  echo "## Training step time, bf16 autocast, fp32 master weights, SGD momentum (one GPU, no comm)"
  echo
  echo "| model | batch | ringmaster ms | torch eager ms | torch.compile ms | ratio rm/eager (target <= 0.8) | rm TFLOP/s | % of ${PEAK} peak |"
  echo "|---|---|---|---|---|---|---|---|"
  for c in "${cases[@]}"; do
    read -r name hidden batch <<<"$c"
    r=$(get ringmaster "$name" ms_per_step); e=$(get torch-eager "$name" ms_per_step); t=$(get torch-compile "$name" ms_per_step)
    tf=$(get ringmaster "$name" tflops)
    ratio=$(awk -v a="$r" -v b="$e" 'BEGIN{ if (a>0 && b>0) printf "%.2f", a/b; else print "n/a" }')
    pct=$(awk -v a="$tf" -v p="$PEAK" 'BEGIN{ if (a>0) printf "%.0f%%", 100*a/p; else print "n/a" }')
    echo "| $name ($(get ringmaster "$name" shape)) | $batch | ${r:-n/a} | ${e:-n/a} | ${t:-n/a} | $ratio | ${tf:-n/a} | $pct |"
  done
  echo
  echo "Ceiling: plain cuBLAS bf16 GEMM 8192^3 = ${ceil:-n/a} TFLOP/s with bf16 output, ${ceil32:-n/a} TFLOP/s with fp32 output"
  echo "(dense bf16 peak ${PEAK} TFLOP/s). Wide-MLP target: >= 60% of peak."
  echo
  echo "## One-rank NCCL: raw ncclAllReduce vs ringmaster's backend and fusion path (target overhead <= 5%)"
  echo
  echo "| kind | bytes | raw us, synced per call | raw us, batched | ringmaster us | overhead vs synced raw |"
  echo "|---|---|---|---|---|---|"
  grep '^RESULT kind=\(backend\|fusion\)' "$log" | while read -r line; do
    f() { tr ' ' '\n' <<<"$line" | sed -n "s/^$1=//p"; }
    if [ "$(f kind)" = fusion ]; then synced=$(f raw_us); batched="-"; else synced=$(f raw_sync_us); batched=$(f raw_us); fi
    echo "| $(f kind) | $(f bytes) | $synced | $batched | $(f rm_us) | $(f overhead_pct)% |"
  done
  echo
  echo "\`ringmaster-worker bench --backend nccl\` (nccl-tests format) is in the raw log."
} >"$res"
echo "wrote $res"
