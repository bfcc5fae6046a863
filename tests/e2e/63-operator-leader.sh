#!/usr/bin/env bash
# 63-operator-leader: two operators with --leader-elect share one Lease and one rendezvous address.
# Exactly one leads (ringmaster_is_leader, /readyz, the Lease holder) and reconciles; after the
# leader is killed (-9, no release) the other takes over in < 20 s and serves a new job.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
HIDDEN="1024, 1024"   # slow enough (~10 s/epoch on 2 cores) to act mid-training
start_kubesim
install_crd
start_operator a --leader-elect --leader-election-namespace default --leader-election-id rm-e2e
start_operator b --leader-elect --leader-election-namespace default --leader-election-id rm-e2e
wait_for 30 "a leader" bash -c "[ \"\$(kubectl get lease rm-e2e -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)\" != '' ]"
sleep 3
la=$(metric "$OP_METRICS_a" '^ringmaster_is_leader'); lb=$(metric "$OP_METRICS_b" '^ringmaster_is_leader')
[ $((la + lb)) -eq 1 ] || fail "is_leader a=$la b=$lb (want exactly one)"
if [ "$la" -eq 1 ]; then L=a; F=b; else L=b; F=a; fi
eval "LPID=\$OP_PID_$L LPROBE=\$OP_PROBE_$L FPROBE=\$OP_PROBE_$F FMETRICS=\$OP_METRICS_$F FPID=\$OP_PID_$F"
curl -fsS "http://127.0.0.1:$LPROBE/readyz" >/dev/null || fail "leader not ready"
! curl -fsS "http://127.0.0.1:$FPROBE/readyz" >/dev/null 2>&1 || fail "follower says ready"
fast_job one 1 1 | k apply -f - >/dev/null
wait_for 20 "pod of job one" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=one --no-headers 2>/dev/null | grep -c .) -eq 1 ]"
# only the leader created anything
grep -q 'job=default/one' "$T/operator-$F.log" && fail "follower reconciled job one" || true
holder=$(k get lease rm-e2e -o jsonpath='{.spec.holderIdentity}')
log "leader=$L holder=$holder; kill -9 $LPID"
t0=$(date +%s.%N)
kill -9 "$LPID"
wait_for 25 "takeover" bash -c "[ \"\$(curl -fsS http://127.0.0.1:$FMETRICS/metrics | awk '/^ringmaster_is_leader/ {print \$2}')\" = 1 ]"
t1=$(date +%s.%N)
dt=$($PY -c "print(round($t1-$t0,2))")
log "takeover after ${dt}s"
$PY -c "import sys; sys.exit(0 if $dt < 20 else 1)" || fail "takeover took ${dt}s"
[ "$(k get lease rm-e2e -o jsonpath='{.spec.holderIdentity}')" != "$holder" ] || fail "lease holder unchanged"
fast_job two 1 1 | k apply -f - >/dev/null
wait_for 20 "pod of job two" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=two --no-headers 2>/dev/null | grep -c .) -eq 1 ]"
wait_for 120 "job one Succeeded under the new leader" tj_phase_is one Succeeded
# a graceful stop releases the Lease (holderIdentity "") so a successor need not wait 15 s
kill -TERM "$FPID"
wait_for 10 "lease released on SIGTERM" bash -c "[ -z \"\$(kubectl get lease rm-e2e -o jsonpath='{.spec.holderIdentity}')\" ]"
log "PASS"
