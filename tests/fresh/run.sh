#!/usr/bin/env bash
# make test-fresh: the README's two commands on a fresh Debian 12, for real. A clean container from the
# mmdebstrap-made debian:12 base (nothing installed but Debian's apt variant) gets this repository's
# files (tracked and untracked-not-ignored: what a clone plus your edits would hold, no build outputs),
# installs only `make`, then runs `make demo` and then `make test`; both must succeed.
# The container has its own network namespace (podman's default bridge: a private loopback for the
# tests, NAT to the apt mirror for `make deps`). Logs: build/fresh/{demo,test}.log. Not part of `make test`.
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
"${RM_PODMAN[@]}" run -d --name "$name" "${RM_ULIMITS[@]}" --cap-add SYS_PTRACE --security-opt seccomp=unconfined -e CI="${CI:-}" \
  -v "$tmp/src.tar:/src.tar:ro" "$RM_BASE_IMAGE" sleep infinity >/dev/null
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
step test 'make test'
grep -E '^e2e: [0-9]+ passed, 0 failed' "$out/test.log"
grep -E '^(PASS|FAIL) ' "$out/test.log" > "$out/e2e-summary.txt" || true
echo "test-fresh: e2e scripts that skipped inside the container (and why):"
"${RM_PODMAN[@]}" exec "$name" sh -c 'grep -H "^SKIP" /src/build/e2e-logs/*.log' | sed 's/^/    /' || echo "    none"
echo "test-fresh: make demo then make test passed on a fresh Debian 12 container in $(( $(date +%s) - start )) s"
