#!/usr/bin/env bash
# `make test-gpu` from inside `make test`: on a GPU machine it runs the GPU checks; here (no GPU) it
# must still compile and link the GPU test program and then say plainly that it skipped.
set -euo pipefail
out=$("$RM_ROOT"/tests/gpu/run.sh)
echo "$out"
grep -q -e '^SKIP: no GPU present' -e '^test-gpu: passed' <<<"$out"
grep -q -e '^built ' <<<"$out"
