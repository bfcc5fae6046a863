#!/usr/bin/env bash
# bench/gpu/device.sh — the one call on a lent GPU machine (docs/gpu.md, "The device run"): unpacks
# bench/gpu/bundle.sh's .gpu/bundle.tar.xz (built here; the machine builds nothing and reaches no
# registry), points the loader at the bundle and the machine's own CUDA libraries, then runs the
# phases named on the command line (default: all), each under its own time limit so one hang costs
# only its phase. Everything lands in $OUT (default build/device-out): summary.txt (the RESULT
# lines and each phase's verdict), gpu.md (bench/gpu/run.sh's table) and logs.tar.gz (every log).
# DEADLINE_S=N caps the phases so that the whole script ends within N seconds (the logs still
# come back). Without a GPU it prints "SKIP: ..." and exits 0.
#
# Phases: env  test-gpu  bench-mlp  run-mlp  torch-gpt  gpt  tf-bench  tensor  sanitizer
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/build/device-out}
mkdir -p "$OUT"
phases=${*:-env test-gpu bench-mlp run-mlp torch-gpt gpt sanitizer}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: no GPU present (nvidia-smi lists none); nothing run"; exit 0
fi
b=/tmp/rm-bundle
logs=$OUT/logs
rm -rf "$b" "$logs"; mkdir -p "$b" "$logs"
xz -dc .gpu/bundle.tar.xz | tar -C "$b" -xf - || { echo "FAIL cannot unpack .gpu/bundle.tar.xz"; exit 1; }

# CUDA's libraries from the machine: its toolkit, else the Python wheels PyTorch brought
cudadirs=
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  d=$( { ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null
         python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in os.listdir(p)]' 2>/dev/null
       } | while read -r x; do [ -e "$x/$lib" ] && { echo "$x"; break; }; done)
  [ -n "$d" ] && case ":$cudadirs:" in *":$d:"*) ;; *) cudadirs=$cudadirs:$d ;; esac
done
export LD_LIBRARY_PATH=$b/lib$cudadirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RM_PREBUILT=$b/bin RM_BIN=$b/bin PATH=$b/bin:$PATH
# the worker's built-in fashion-mnist folder (common/trainingjob.h)
[ -d /usr/share/datasets/fashion-mnist ] || { mkdir -p /usr/share/datasets && cp -r "$b/data/fashion-mnist" /usr/share/datasets/; }
sum=$OUT/summary.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
echo "device: $gpu; $(date -u +%Y-%m-%dT%H:%MZ); phases: $phases" | tee "$sum"

phase() { # phase NAME LIMIT_S CMD... — runs CMD with a time limit, log to logs/NAME.log
  local name=$1 lim=$2; shift 2
  local t0=$SECONDS rc
  if [ "${DEADLINE_S:-0}" -gt 0 ]; then   # the whole call's budget: cap the phase, or skip it
    local left=$((DEADLINE_S - SECONDS - 15))
    [ "$left" -lt "$lim" ] && lim=$left
    if [ "$lim" -lt 20 ]; then echo "PHASE $name skipped: ${left}s left of DEADLINE_S=$DEADLINE_S" | tee -a "$sum"; return; fi
  fi
  echo "=== $name (limit ${lim}s)"
  timeout -k 10 "$lim" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  tail -n 25 "$logs/$name.log"
  grep -h '^RESULT' "$logs/$name.log" >>"$sum"
  echo "PHASE $name rc=$rc seconds=$((SECONDS - t0))$([ $rc = 124 ] && echo ' TIMED OUT')" | tee -a "$sum"
}

for p in $phases; do
  case $p in
  env) phase env 30 sh -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv;
       echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; for x in "$RM_BIN"/*; do ldd "$x" | grep -E "not found|cuda|cublas|nccl"; done | sort -u;
       ringmaster --version; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)";
       nproc; free -g' ;;
  test-gpu) GPU_TRAIN_EPOCHS=1 GPU_SANITIZER_SKIP=1 phase test-gpu 200 tests/gpu/run.sh ;;
  bench-mlp) STEPS=50 phase bench-mlp 200 bench/gpu/run.sh; cp bench/results/gpu.md "$OUT/gpu.md" 2>/dev/null
             cp build/bench-gpu/results.log "$logs/bench-mlp-results.log" 2>/dev/null ;;
  run-mlp) sed -e 's/^  replicas: 4$/  replicas: 1/' -e 's/^  minReplicas: 2$/  minReplicas: 1/' -e 's/^  maxReplicas: 4$/  maxReplicas: 1/' \
             deploy/examples/fashion-mnist-gpu.yaml >"$logs/fmnist-gpu-1.yaml"
           RINGMASTER_DEVICE=cuda phase run-mlp 120 ringmaster run -f "$logs/fmnist-gpu-1.yaml" --epochs 2 \
             --checkpoint-dir /tmp/rm-ck-mlp --run-dir "$logs/run-mlp" ;;
  torch-gpt) phase torch-ceilings 60 python3 bench/gpu/torch_gpt2.py ceilings
             phase torch-gpt 240 python3 bench/gpu/torch_gpt2.py train --impl "${TORCH_IMPL:-eager,compile}" \
               --batch "${GPT_BATCH:-16}" --steps "${GPT_STEPS:-20}" --warmup 5 ;;
  gpt) if [ -x bench/gpu/gpt_device.sh ]; then phase gpt 300 bench/gpu/gpt_device.sh "$logs"; else echo "gpt: not prepared"; fi ;;
  tf-bench) phase tf-bench 120 tf_bench ;;
  tensor) cp -r datasets/tinyshakespeare /usr/share/datasets/ 2>/dev/null
          phase tensor 300 bench/gpu/tensor_device.sh "$logs/tensor" ;;
  sanitizer) GPU_TRAIN_SKIP=1 GPU_PIPE_SKIP=1 GPU_SANITIZER_ONLY=1 phase sanitizer 150 tests/gpu/run.sh ;;
  *) echo "unknown phase $p" ;;
  esac
done
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$logs"
echo "--- summary"; cat "$sum"
