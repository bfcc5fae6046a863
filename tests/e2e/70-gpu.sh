#!/usr/bin/env bash
# `make test-gpu` from inside `make test`: on a GPU machine it runs the GPU checks; without a GPU but
# with the CUDA toolkit (a CUDA build) it must still compile and link the GPU test program and then
# say plainly that it skipped; without the toolkit (a CPU-only build) there is no GPU code to compile
# and it must say that instead.
set -euo pipefail
out=$("$RM_ROOT"/tests/gpu/run.sh)
echo "$out"
if grep -q '^SKIP: no GPU present (built without CUDA' <<<"$out"; then
  ! grep -q '^built ' <<<"$out" || { echo "FAIL: a CPU-only build claims to have built the GPU tests"; exit 1; }
  echo "SKIP: CPU-only build (no CUDA toolkit): the GPU test program cannot be compiled here"
  exit 0
fi
grep -q -e '^built ' <<<"$out" || { echo "FAIL: a CUDA build did not build the GPU test program"; exit 1; }
grep -q -e '^SKIP: no GPU present' -e '^test-gpu: passed' <<<"$out" || { echo "FAIL: neither passed nor skipped"; exit 1; }
