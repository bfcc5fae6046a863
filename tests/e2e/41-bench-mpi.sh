#!/usr/bin/env bash
# `mpirun -np 2 ringmaster-worker bench --backend mpi`: the world comes from Open MPI (no
# rendezvous, no peers), MPI_Allreduce gives #wrong 0, and the table/footer are printed once.
# Skips (exit 0) when mpirun is not installed. Loopback only.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: no mpirun"; exit 0; fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_plm_rsh_agent=false   # never try ssh
out="$TMPDIR/mpi.out"
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca btl tcp,self \
  "$W" bench --backend mpi -b 1K -e 1M -f 8 -n 5 -w 1 --json "$TMPDIR/mpi.json" > "$out" 2> "$TMPDIR/mpi.err" || {
  cat "$out" "$TMPDIR/mpi.err"; exit 1; }
cat "$out"
grep -q '^# ringmaster-worker bench: allreduce, backend mpi, 2 ranks' "$out"
[ "$(grep -c '^# Avg bus bandwidth' "$out")" -eq 1 ] || { echo "footer not printed exactly once"; exit 1; }
grep -q '^# Out of bounds values : 0 OK' "$out"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +-1 ' "$out")
[ "$rows" -eq 4 ] || { echo "want 4 rows, got $rows"; exit 1; }
awk '/^ +[0-9]+ +[0-9]+ +float/ { if ($9 != 0 || $13 != 0) { print "wrong values: " $0; exit 1 } }' "$out"
/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['backend']=='mpi' and d['world']==2 and all(r['ip']['wrong']==0 for r in d['rows'])" "$TMPDIR/mpi.json"
# reduce_scatter / all_gather over MPI (docs/strategies.md#sharding): even counts take the _block
# forms, odd element counts (-i 12 steps from 4 bytes) the per-rank-count forms; #wrong 0 either way
for op in reduce_scatter all_gather; do
  for sz in "-b 1K -e 64K -f 8" "-b 4 -e 40 -i 12"; do
    # shellcheck disable=SC2086
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 \
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca btl tcp,self \
      "$W" bench --backend mpi --op "$op" $sz -n 3 -w 1 > "$out" 2> "$TMPDIR/mpi.err" || {
      cat "$out" "$TMPDIR/mpi.err"; exit 1; }
    cat "$out"
    grep -q "^# ringmaster-worker bench: $op, backend mpi, 2 ranks" "$out"
    grep -q '^# Out of bounds values : 0 OK' "$out"
    awk '/^ +[0-9]+ +[0-9]+ +float/ { if ($9 != 0 || $13 != 0) { print "wrong values: " $0; exit 1 } }' "$out"
  done
done
echo "mpi bench ok"
