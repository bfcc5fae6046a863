#!/usr/bin/env bash
# kubesim's process kubelet and fault endpoint (tests/kubesim/py/kubelet_checks.py).
. "$RM_ROOT/tests/kubesim/testlib.sh"
export KUBESIM_BACKOFF_BASE_S=1
ks_start --image-map kubesim/echo=/bin/echo
timeout 110 /usr/bin/python3 "$RM_ROOT/tests/kubesim/py/kubelet_checks.py" || fail "kubelet checks"
# SIGTERM: kubesim exits cleanly and kills its pods
kill -TERM "$KS_PID"; wait "$KS_PID"; rc=$?
[ "$rc" -eq 0 ] && ok "kubesim exits 0 on SIGTERM" || fail "kubesim exit code $rc"
KS_PID=""
sleep 0.3
for p in $(pgrep -f "python3 -m http.server 8080 --bind 127.0.0" || true); do
  if [ "$(cat /proc/$p/environ 2>/dev/null | tr '\0' '\n' | grep -c "^HOSTNAME=ready$")" != 0 ]; then fail "pod process $p survived"; fi
done
ok "pod processes killed on exit"
