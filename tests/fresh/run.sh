#!/usr/bin/env bash
# make test-fresh: the README's two commands on a fresh Debian 12, for real. A clean container from the
# mmdebstrap-made debian:12 base (nothing installed but Debian's apt variant) gets this repository's
# files (tracked and untracked-not-ignored: what a clone plus your edits would hold, no build outputs),
# installs only `make`, then runs `make demo` and then `make test`; both must succeed.
# The container has its own network namespace (podman's default bridge: a private loopback for the
# tests, NAT to the apt mirror for `make deps`). Logs: build/fresh/{demo,test}.log and build/fresh/e2e-logs/.
# Not part of `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/podman-lib.sh"
why=$(rm_podman_why_not) || { echo "test-fresh: cannot run: $why" >&2; exit 1; }
rm_ensure_base
out="$root/build/fresh"; mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rm-fresh.XXXXXX")
name="rm-fresh-$$"
cleanup() { "${RM_PODMAN[@]}" rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
( cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf "$tmp/src.tar" )
echo "test-fresh: $(tar tf "$tmp/src.tar" | wc -l) files copied in; logs in $out"
start=$(date +%s)
# This network's own certificate authorities (an egress proxy that re-signs TLS, say): the host
# trusts them through /usr/local/share/ca-certificates, and a fresh machine on the same network
# would too. npm (make deps' `npm ci`) reads them from NODE_EXTRA_CA_CERTS; nothing else is added.
touch "$tmp/extra-ca.pem"
for c in /usr/local/share/ca-certificates/*.crt; do [ -f "$c" ] && cat "$c" >> "$tmp/extra-ca.pem"; done
[ -s "$tmp/extra-ca.pem" ] && echo "test-fresh: this network's CA certificates passed in (NODE_EXTRA_CA_CERTS)"
"${RM_PODMAN[@]}" run -d --name "$name" "${RM_ULIMITS[@]}" --cap-add SYS_PTRACE --security-opt seccomp=unconfined -e CI="${CI:-}" \
  -v "$tmp/src.tar:/src.tar:ro" -v "$tmp/extra-ca.pem:/etc/rm-extra-ca.pem:ro" -e NODE_EXTRA_CA_CERTS=/etc/rm-extra-ca.pem \
  "$RM_BASE_IMAGE" \
  bash -c 'while :; do sleep 3600 & wait $!; done' >/dev/null
# (PID 1 is bash, which reaps orphans as a machine's init does: with `sleep infinity` every process
# whose parent died, e.g. the workers of e2e 55's kill -9 case, stayed a zombie for the whole run)
step() {  # step NAME COMMAND: run COMMAND in the container, log to $out/NAME.log, time it
  local s=$(date +%s) rc=0
  "${RM_PODMAN[@]}" exec -w /src "$name" bash -c "$2" > "$out/$1.log" 2>&1 || rc=$?
  echo "test-fresh: $1: rc=$rc ($(( $(date +%s) - s )) s)"
  if [ $rc -ne 0 ]; then tail -n 60 "$out/$1.log" | sed 's/^/    /'; fi
  return $rc
}
"${RM_PODMAN[@]}" exec "$name" bash -c 'mkdir -p /src && tar xf /src.tar -C /src'
step setup 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends make'
step demo 'make demo'
grep -E '^Succeeded: testAccuracy' "$out/demo.log" || { echo "test-fresh: make demo printed no Succeeded line"; exit 1; }
test_rc=0
step test 'make test' || test_rc=$?
# the e2e logs leave with us: a failure's first lines are not in the tail printed above
rm -rf "$out/e2e-logs"
"${RM_PODMAN[@]}" cp "$name:/src/build/e2e-logs" "$out/e2e-logs" 2>/dev/null \
  && echo "test-fresh: e2e logs copied to $out/e2e-logs" || true
[ "$test_rc" -eq 0 ] || exit "$test_rc"
grep -E '^e2e: [0-9]+ passed, 0 failed' "$out/test.log"
grep -E '^(PASS|FAIL) ' "$out/test.log" > "$out/e2e-summary.txt" || true
echo "test-fresh: e2e scripts that skipped inside the container (and why):"
"${RM_PODMAN[@]}" exec "$name" sh -c 'grep -H "^SKIP" /src/build/e2e-logs/*.log' | sed 's/^/    /' || echo "    none"
echo "test-fresh: make demo then make test passed on a fresh Debian 12 container in $(( $(date +%s) - start )) s"
