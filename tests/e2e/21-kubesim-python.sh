#!/usr/bin/env bash
# kubesim driven by Debian's python3-kubernetes: CRUD, 409s, and a watch that survives 410.
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_start --no-kubelet
timeout 90 /usr/bin/python3 "$RM_ROOT/tests/kubesim/py/client_checks.py" || fail "python client checks"
