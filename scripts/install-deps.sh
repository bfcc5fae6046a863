#!/usr/bin/env bash
# Installs the Debian packages given as arguments, only those missing; idempotent.
# Runs apt-get update at most once, and only when something has to be installed.
# When apt-get cannot install them all (a name unknown to the mirror, a conflict), it tries each
# one alone and ends by naming every package still missing, with exit status 1.
set -euo pipefail
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "$@"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#@} packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo: cannot install ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || echo "deps: apt-get update failed; trying with the package lists there are" >&2
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "deps: installing them together failed; trying one at a time" >&2
  for p in "${missing[@]}"; do
    installed "$p" || $SUDO apt-get install -y -qq --no-install-recommends "$p" || true
  done
fi
still=()
for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
if [ ${#still[@]} -gt 0 ]; then
  echo "deps: could not install: ${still[*]}" >&2
  for p in "${still[@]}"; do
    apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]' || echo "deps:   $p: no candidate in the configured apt sources" >&2
  done
  exit 1
fi
echo "deps: installed ${missing[*]}"
