# bench/lib/cpucap.sh — one emulated machine per process: run each worker and server of a
# `ringmaster run` job inside a CPU cap of its own (a cgroup with a CFS quota), so that a
# benchmark of N processes on a machine with fewer cores measures the schedule of N machines of
# a fixed, known speed instead of N processes fighting for the cores. A straggler emulated by the
# `slow` fault then sleeps on its own "machine": the cores it leaves idle are not handed to the
# others, as they would not be on separate machines.
#
# Source it from a bench script, then:
#   cpucap_available            -> 0 when a writable cgroup v1 "cpu" or v2 hierarchy is there
#   cpucap_start WORKER [PS]    -> every worker capped at WORKER CPUs (e.g. 0.4), every server at
#                                  PS CPUs (default: WORKER); exports RINGMASTER_WORKER_BIN so that
#                                  `ringmaster run` starts the processes through cpucap-exec
#   cpucap_stop                 -> removes the cgroups (waits for their processes to be gone)
#   CPUCAP_SHARES=K (env, optional) -> the job's cpu.shares (v1) or cpu.weight (v2), set on the
#                                  group holding all its processes' groups: its weight against
#                                  processes outside the job (1024 / 100 is one ordinary process). On a machine busy with other work a capped process
#                                  gets less than its cap, and a straggler's sleep then hands its
#                                  share to the others again; a large weight makes the cap the
#                                  process's actual speed, at the expense of the other work.
# A process with a cap of at most one CPU runs one BLAS thread (OPENBLAS_NUM_THREADS=1 unless
# set): a second thread would only spin on the same quota.
# The cap is a ceiling (cfs_quota over a 10 ms period): a capped process gets at most that share
# of one core; it gets it only if the machine has it to spare, so the caps of all processes of a
# job should add up to less than the cores (the scripts print the sum).
# Needs root (writes under /sys/fs/cgroup). Owns: the cgroup directories it creates.

CPUCAP_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

cpucap__root() {  # the hierarchy to create groups in: v1 cpu controller, else v2 with "cpu"
  if [ -w /sys/fs/cgroup/cpu/cgroup.procs ] && [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    echo "v1 /sys/fs/cgroup/cpu"
  elif [ -w /sys/fs/cgroup/cgroup.procs ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo "v2 /sys/fs/cgroup"
  else
    return 1
  fi
}

cpucap_available() { cpucap__root >/dev/null; }

cpucap_start() {  # cpucap_start WORKER_CPUS [PS_CPUS]
  local w=$1 p=${2:-$1} kind root
  read -r kind root < <(cpucap__root) || { echo "cpucap: no writable cgroup cpu controller" >&2; return 1; }
  export RM_CPUCAP_KIND=$kind RM_CPUCAP_DIR="$root/ringmaster-bench-$$" RM_CPUCAP_WORKER=$w RM_CPUCAP_PS=$p
  export RM_CPUCAP_SHARES=${CPUCAP_SHARES:-}
  mkdir -p "$RM_CPUCAP_DIR"
  if [ "$kind" = v2 ]; then echo +cpu > "$RM_CPUCAP_DIR/cgroup.subtree_control" 2>/dev/null || true; fi
  if [ -n "$RM_CPUCAP_SHARES" ]; then   # the parent competes with the rest of the machine
    if [ "$kind" = v2 ]; then echo "$RM_CPUCAP_SHARES" > "$RM_CPUCAP_DIR/cpu.weight"
    else echo "$RM_CPUCAP_SHARES" > "$RM_CPUCAP_DIR/cpu.shares"; fi
  fi
  export RM_CPUCAP_REAL=${RINGMASTER_WORKER_BIN:-${BIN:?cpucap_start: set BIN or RINGMASTER_WORKER_BIN}/ringmaster-worker}
  export RINGMASTER_WORKER_BIN="$CPUCAP_LIB/cpucap-exec"
}

cpucap_stop() {
  [ -n "${RM_CPUCAP_DIR:-}" ] && [ -d "$RM_CPUCAP_DIR" ] || return 0
  local d i
  for d in "$RM_CPUCAP_DIR"/*/; do
    [ -d "$d" ] || continue
    for i in $(seq 50); do rmdir "$d" 2>/dev/null && break; sleep 0.1; done
  done
  rmdir "$RM_CPUCAP_DIR" 2>/dev/null || echo "cpucap: $RM_CPUCAP_DIR still in use" >&2
  export RINGMASTER_WORKER_BIN=$RM_CPUCAP_REAL
  unset RM_CPUCAP_DIR
}
