#!/usr/bin/env bash
# bench/gpu/bundle.sh — builds here everything the device run (bench/gpu/device.sh) executes and packs
# it into .gpu/bundle.tar.xz: a GPU machine lent for minutes reaches no package registry and has none
# of the worker's libraries, so it builds nothing (docs/gpu.md, "The device run").
#
# The bundle: bin/ (ringmaster, ringmaster-worker, tests/gpu's gpu_tests, bench/gpu's step_bench,
# nccl_bench, gemm_ceiling, tf_bench), lib/ (every shared library those need except the C library family,
# libstdc++/libgcc_s, which any newer system has, and CUDA's own - cudart, cuBLAS(Lt), NCCL -, which
# must match the device's driver and come from its CUDA installation) and data/fashion-mnist.
# `bench/gpu/bundle.sh --check` then loads every binary in a clean Debian container with only the
# bundle's libraries (podman; the CUDA libraries are the only ones allowed to be missing there).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
stage=build/gpu-bundle
dest=.gpu/bundle.tar.xz

make -s WERROR=1 all >/dev/null
if [ "$(make -s info | sed -n 's/.*cuda=\([01]\).*/\1/p')" != 1 ]; then
  echo "bundle: built without CUDA (nvcc or NCCL not found under $CUDA_HOME)"; exit 1
fi
tests/gpu/run.sh >/dev/null              # builds build/gpu/gpu_tests, then skips (no GPU here)
BUILD_ONLY=1 bench/gpu/run.sh >/dev/null # builds build/bench-gpu/*

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/data/fashion-mnist" .gpu
cp bin/ringmaster bin/ringmaster-worker build/gpu/gpu_tests \
   build/bench-gpu/step_bench build/bench-gpu/nccl_bench build/bench-gpu/gemm_ceiling build/bench-gpu/tf_bench "$stage/bin/"
skip='^(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl)\.so'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  grep -Eq "$skip" <<<"$base" || cp -L "$lib" "$stage/lib/$base"
done
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/data/fashion-mnist/"
tar -C "$stage" -cf - . | xz -T0 -6 >"$dest.tmp"
mv "$dest.tmp" "$dest"
echo "bundle: $dest $(du -h "$dest" | cut -f1) ($(ls "$stage/lib" | wc -l) libraries)"

if [ "${1:-}" = --check ]; then
  img=${RM_BASE_IMAGE:-docker.io/library/debian:12}   # scripts/podman-lib.sh imports it
  podman run --rm --runtime runc --ulimit nofile=16384:16384 --ulimit nproc=16384:16384 --network none -v "$root/$stage:/b:ro" "$img" sh -c '
    export LD_LIBRARY_PATH=/b/lib
    miss=$(for b in /b/bin/*; do ldd $b | grep "not found"; done | sort -u)
    echo "$miss"
    echo "$miss" | grep -v "^$" | grep -Ev "lib(cudart|cublas|cublasLt|nccl)\.so" && exit 1
    echo "bundle check: every library found but CUDA'"'"'s own"'
fi
