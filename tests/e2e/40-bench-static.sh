#!/usr/bin/env bash
# `ringmaster-worker bench` in static mode (--world/--rank/--peers, no controller): 2 and 3 ranks
# over loopback print the nccl-tests table with #wrong 0 on every row, the footer, and a JSON file
# that agrees; with no world at all a world of one checks clean; a wrong token on one rank fails both within the timeout; a bad flag is a usage error.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
py=/usr/bin/python3
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_ports() {   # N free loopback ports, held open together so they are distinct
  $py - "$1" <<'PY'
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(",".join("127.0.0.1:%d" % s.getsockname()[1] for s in ss))
PY
}

run_world() {   # run_world N extra-args... ; rank 0's stdout -> $TMPDIR/out.N
  local n=$1; shift
  local peers; peers=$(free_ports "$n")
  pids=()
  for r in $(seq 1 $((n - 1))); do
    "$W" bench --world "$n" --rank "$r" --peers "$peers" "$@" > "$TMPDIR/rank$r.$n.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  "$W" bench --world "$n" --rank 0 --peers "$peers" "$@" > "$TMPDIR/out.$n" 2> "$TMPDIR/err.$n" || rc=$?
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}

check_table() {   # check_table FILE NROWS
  local f=$1 rows=$2
  cat "$f"
  grep -q '^#  *size  *count  *type  *redop  *root  *time  *algbw  *busbw  *#wrong  *time  *algbw  *busbw  *#wrong' "$f"
  grep -q '^# Avg bus bandwidth *: [0-9.]*' "$f"
  grep -q '^# Out of bounds values : 0 OK' "$f"
  local got; got=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +-1 ' "$f")
  [ "$got" -eq "$rows" ] || { echo "want $rows rows, got $got"; return 1; }
  # #wrong columns (9th and 13th) are 0 on every row; busbw is a number > 0 for large rows
  awk '/^ +[0-9]+ +[0-9]+ +float/ { if ($9 != 0 || $13 != 0) { print "wrong values: " $0; exit 1 } }' "$f"
}

# 2 ranks, 1 KiB .. 4 MiB (x4): 7 rows, JSON written by rank 0
run_world 2 -b 1K -e 4M -f 4 -n 5 -w 1 --timeout 20 --json "$TMPDIR/b2.json"
check_table "$TMPDIR/out.2" 7
$py - "$TMPDIR/b2.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["backend"] == "ring" and d["world"] == 2, d
assert len(d["rows"]) == 7
for r in d["rows"]:
    assert r["oop"]["wrong"] == 0 and r["ip"]["wrong"] == 0
    assert r["count"] * 4 == r["size"]
    assert abs(r["ip"]["busbw"] - r["ip"]["algbw"]) < 1e-3   # 2(n-1)/n = 1 for n = 2
print("json ok, avg busbw", d["avg_busbw"])
PY

# 3 ranks, odd-sized steps (-i), counts not divisible by 3
run_world 3 -b 12 -e 40008 -i 13332 -n 3 -w 1 --timeout 20
check_table "$TMPDIR/out.3" 4

# --fusion: per-layer (threshold 0) vs 2-layer buckets vs one bucket; the averaged result is checked
run_world 2 --fusion --layers 20 --layer-floats 1000 --thresholds 0,8000,1000000 -n 3 -w 1 --timeout 20
cat "$TMPDIR/out.2"
awk '/^ +[0-9]+ +[0-9]+ +[0-9.]+/ { n++; b[n] = $2; if ($7 != 0) { print "wrong: " $0; exit 1 } }
     END { if (n != 3 || b[1] != 20 || b[2] != 10 || b[3] != 1) { print "bad fusion rows n=" n " buckets " b[1] "," b[2] "," b[3]; exit 1 } }' "$TMPDIR/out.2"

# --op reduce_scatter / all_gather (docs/strategies.md#sharding): same table, #wrong 0 (reduce_scatter
# checks each rank's shard, all_gather the whole vector), counts not divisible by the world, busbw =
# algbw * (n-1)/n
for op in reduce_scatter all_gather; do
  run_world 3 --op "$op" -b 4 -e 40008 -i 13332 -n 3 -w 1 --timeout 20 --json "$TMPDIR/$op.json"
  check_table "$TMPDIR/out.3" 4
  grep -q "^# ringmaster-worker bench: $op, backend ring, 3 ranks" "$TMPDIR/out.3"
  $py - "$TMPDIR/$op.json" "$op" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["op"] == sys.argv[2] and d["world"] == 3, d
for r in d["rows"]:
    assert r["oop"]["wrong"] == 0 and r["ip"]["wrong"] == 0
    for k in ("oop", "ip"):
        assert abs(r[k]["busbw"] - r[k]["algbw"] * 2 / 3) <= 1e-3 + 1e-3 * r[k]["algbw"], r
print(sys.argv[2], "json ok")
PY
done
set +e
"$W" bench --op broadcast > /dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "bad --op: want exit 2, got $rc"; exit 1; }

# a rank with the wrong token: both sides fail (no hang), exit status non-zero
peers=$(free_ports 2)
"$W" bench --world 2 --rank 1 --peers "$peers" --token bad --timeout 2 -b 1K -e 1K > "$TMPDIR/tok1.log" 2>&1 &
pids=($!)
start=$(date +%s)
if "$W" bench --world 2 --rank 0 --peers "$peers" --token good --timeout 2 -b 1K -e 1K > "$TMPDIR/tok0.log" 2>&1; then
  echo "wrong token was accepted"; exit 1
fi
if wait "${pids[0]}"; then echo "rank 1 with the wrong token succeeded"; exit 1; fi
pids=()
[ $(( $(date +%s) - start )) -le 10 ] || { echo "wrong token took too long to fail"; exit 1; }
cat "$TMPDIR/tok0.log" "$TMPDIR/tok1.log"
grep -qiE 'authentication|refused|timed out' "$TMPDIR/tok0.log" "$TMPDIR/tok1.log"

# no world given (no rendezvous, no --world): a world of one, whose checked sums are the inputs
# themselves - the world size the check scales by must be 1, not unset (every row #wrong 0)
env -u RINGMASTER_RENDEZVOUS "$W" bench --backend local -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 > "$TMPDIR/one.log"
grep -q 'backend local, 1 ranks' "$TMPDIR/one.log" || { cat "$TMPDIR/one.log"; echo "world of one: not 1 rank"; exit 1; }
grep -q '^# Out of bounds values : 0 OK' "$TMPDIR/one.log" || { cat "$TMPDIR/one.log"; echo "world of one: wrong values"; exit 1; }

# usage errors
set +e
"$W" bench -n 0 > /dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "bad flag: want exit 2, got $rc"; exit 1; }
echo "bench static mode ok"
