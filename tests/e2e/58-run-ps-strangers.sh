#!/usr/bin/env bash
# README "Failure semantics" row F9.
# Strangers at a parameter server (docs/architecture.md#robustness; the README's failure-semantics
# row for parameter servers): one server (`ringmaster-worker ps`, loopback) while a stranger without
# the token keeps 80 silent connections open; workers with the token still join at once (before, the
# strangers' handshakes took the server's 64 places and a replacement worker stayed out until its
# deadline), a silent connection is dropped within the handshake bound, and a server whose 64 member
# places are taken says FULL instead of closing the connection. The fixture (ps_flood.py) does the
# real handshake with the job token.
source "$(dirname "$0")/5x-run-lib.bash"
mkdir -p "$W/ck"
RINGMASTER_PS_INDEX=0 RINGMASTER_PS_ADDRS=127.0.0.1:0 RINGMASTER_BIND_ADDR=127.0.0.1 \
RINGMASTER_TOKEN=e2e-ps-token WORLD_SIZE=64 RINGMASTER_CHECKPOINT_DIR="$W/ck" \
  "$RM_BIN/ringmaster-worker" ps --metrics-addr off >"$W/ps.err" 2>&1 &
PS_PID=$!
port=""
for i in $(seq 1 100); do
  port=$(sed -n 's/.*msg="parameter server ready".* listen=[0-9.]*:\([0-9]*\).*/\1/p' "$W/ps.err" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { kill "$PS_PID"; fail "no 'parameter server ready' line"; }
set +e; timeout 120 $PY "$FIX/ps_flood.py" 127.0.0.1 "$port" e2e-ps-token >"$W/flood.out" 2>&1; rc=$?; set -e
cat "$W/flood.out"
kill -TERM "$PS_PID"
set +e; wait "$PS_PID"; prc=$?; set -e
[ $rc -eq 0 ] || fail "the strangers kept workers out (ps_flood exit $rc)"
[ $prc -eq 0 ] || fail "the server exited $prc after SIGTERM"
grep -q 'reason="too many unfinished handshakes' "$W/ps.err" || fail "the server did not log making room"
assert_no_workers
log "PASS $(head -1 "$W/flood.out")"
