# bench/lib/ports.sh — how the collective benchmarks (bench/allreduce, shard, shm, hier) start a
# world of ranks on this host; sourced, not run. One copy of what each run.sh had written out.
#
#   free_ports N   -> prints "127.0.0.1:P1,...,127.0.0.1:PN": N distinct loopback ports that were
#                     free at the call (all bound at once, so distinct; released on return, so a
#                     process racing for ports could take one: the scripts run alone, or each in its
#                     own network namespace)
#   gloo_ranks N OUTFILE PEER TIMEOUT [ARGS...]
#                  -> one PyTorch Gloo world of N ranks of the Python script PEER, each started as
#                     `PEER --rank R --world N --init file://STORE ARGS...` under /usr/bin/python3
#                     (the interpreter with torch), OMP_NUM_THREADS=1 and `timeout TIMEOUT`: ranks
#                     1..N-1 in the background (stdout dropped), rank 0 in the foreground with its
#                     stdout appended to OUTFILE ("# FAILED rc=N" there when it fails); every rank's
#                     stderr goes to OUTFILE.err. Returns when all ranks have exited.
# Owns: the rendezvous file STORE, made under $RAW (the caller's raw-output folder; required) and
# removed on return. While the ranks run, their pids are in the caller's global array `pids` (so
# a script's EXIT trap can kill them); `pids` is empty again on return.

free_ports() {  # free_ports N
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in ss))
PY
}

gloo_ranks() {  # gloo_ranks N OUTFILE PEER TIMEOUT [ARGS...]
  local n=$1 out=$2 peer=$3 limit=$4; shift 4
  local store="${RAW:?bench/lib/ports.sh: gloo_ranks needs RAW}/gloo-store.$RANDOM$RANDOM" r p
  pids=()
  for r in $(seq 1 $((n - 1))); do
    OMP_NUM_THREADS=1 timeout "$limit" /usr/bin/python3 "$peer" --rank "$r" --world "$n" --init "file://$store" "$@" > /dev/null 2>> "$out.err" &
    pids+=($!)
  done
  OMP_NUM_THREADS=1 timeout "$limit" /usr/bin/python3 "$peer" --rank 0 --world "$n" --init "file://$store" "$@" >> "$out" 2>> "$out.err" || echo "# FAILED rc=$?" >> "$out"
  for p in "${pids[@]}"; do wait "$p" || true; done
  pids=()
  rm -f "$store"
}
