#!/usr/bin/env bash
# bench/ps/capped.sh — bench/ps/run.sh with every worker and every parameter server on an
# emulated machine of its own (bench/lib/cpucap.sh: a CPU cap per process), as the parameter-server
# literature runs them: the servers do not take cores from the workers, and nobody gets more than
# its machine. All of run.sh's knobs pass through; CPUCAP_WORKER (0.6) and CPUCAP_PS
# (CPUCAP_WORKER) are the caps in CPUs. Needs root (cgroups); exits 2 when no cgroup cpu
# controller can be written.
# Example: CPUCAP_WORKER=0.6 WORKERS=2 STRAGGLERS=none VARIANTS="ring sync-b0" ANCHOR=0 \
#          RINGMASTER_SHM=0 bench/ps/capped.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$root/bin}
source "$root/bench/lib/cpucap.sh"
cpucap_available || { echo "capped.sh: no writable cgroup cpu controller (root?)" >&2; exit 2; }
w=${CPUCAP_WORKER:-0.6} p=${CPUCAP_PS:-${CPUCAP_WORKER:-0.6}}
cpucap_start "$w" "$p"
trap cpucap_stop EXIT
echo "capped.sh: each worker capped at $w CPU, each server at $p CPU ($(nproc) CPUs here)" >&2
RM_BIN="$BIN" bash "$root/bench/ps/run.sh"
