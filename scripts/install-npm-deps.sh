#!/usr/bin/env bash
# Installs the npm packages a test folder's package-lock.json pins (tests/s3: s3rver, the
# S3-compatible server of tests/e2e/59-run-fetch-s3.sh) into that folder's node_modules; idempotent:
# nothing is done while node_modules matches the lock file. Without npm on the machine it first
# installs Debian's nodejs and npm (scripts/install-deps.sh).
set -euo pipefail
for dir in "$@"; do
  stamp="$dir/node_modules/.package-lock.json"
  if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then
    echo "deps: npm packages of $dir present"
    continue
  fi
  command -v npm >/dev/null || "$(dirname "$0")/install-deps.sh" nodejs npm
  echo "deps: npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
done
