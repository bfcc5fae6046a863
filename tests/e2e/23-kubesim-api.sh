#!/usr/bin/env bash
# kubesim API rules, one check each, over raw HTTP (tests/kubesim/py/api_checks.py).
. "$RM_ROOT/tests/kubesim/testlib.sh"
export KUBESIM_BOOKMARK_SECONDS=1
ks_start --no-kubelet
KS_CRD=$(ks_crd_file) timeout 100 /usr/bin/python3 "$RM_ROOT/tests/kubesim/py/api_checks.py" || fail "API checks"
