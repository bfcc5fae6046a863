#!/usr/bin/env bash
# Fuzz kubesim (random methods, paths, queries, patch types, bodies incl. huge and truncated JSON):
# it never crashes and always answers errors with a Status.
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_need kubectl "$KS_KUBECTL_WHY"
ks_start --no-kubelet
k apply -f "$(ks_crd_file)" >/dev/null || fail "apply CRD"
FUZZ_SEED=${FUZZ_SEED:-$RANDOM} FUZZ_N=${FUZZ_N:-3000}
echo "FUZZ_SEED=$FUZZ_SEED FUZZ_N=$FUZZ_N"
FUZZ_SEED=$FUZZ_SEED FUZZ_N=$FUZZ_N timeout 100 /usr/bin/python3 "$RM_ROOT/tests/kubesim/py/fuzz.py" || fail "fuzz (seed $FUZZ_SEED)"
kill -0 "$KS_PID" 2>/dev/null && ok "kubesim still running" || fail "kubesim died"
