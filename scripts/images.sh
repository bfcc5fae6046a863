#!/usr/bin/env bash
# images.sh [TARGET...] — builds ringmaster's images here with podman from the Dockerfile:
#   operator    -> ringmaster/operator:latest
#   worker-cpu  -> ringmaster/worker:cpu
#   torch       -> ringmaster/torch-ddp:latest (tests/images/torch-ddp: Debian's python3-torch, a plain DDP script)
#   torch-elastic -> ringmaster/torch-elastic:latest (tests/images/torch-elastic: the same, for torchrun)
# (default: operator worker-cpu). Makes the Debian base with mmdebstrap when missing; podman's layer
# cache makes a rebuild with unchanged sources take seconds. Then checks every image runs as UID 65532
# with a read-only root filesystem, and prints each image's size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/podman-lib.sh"
why=$(rm_podman_why_not) || { echo "images: cannot build: $why" >&2; exit 1; }
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(operator worker-cpu)
rm_ensure_base
run_ro() { "${RM_PODMAN[@]}" run --rm --read-only --network none "${RM_ULIMITS[@]}" "$@"; }
for t in "${targets[@]}"; do
  start=$(date +%s)
  case "$t" in
    operator)   tag=ringmaster/operator:latest; ctx="$root"; file="$root/Dockerfile"; tgt=(--target operator) ;;
    worker-cpu) tag=ringmaster/worker:cpu;      ctx="$root"; file="$root/Dockerfile"; tgt=(--target worker-cpu) ;;
    torch)      tag=ringmaster/torch-ddp:latest; ctx="$root/tests/images/torch-ddp"; file="$ctx/Containerfile"; tgt=() ;;
    torch-elastic) tag=ringmaster/torch-elastic:latest; ctx="$root/tests/images/torch-elastic"; file="$ctx/Containerfile"; tgt=() ;;
    *) echo "images: unknown target '$t' (operator, worker-cpu, torch, torch-elastic)" >&2; exit 2 ;;
  esac
  echo "images: building $tag" >&2
  "${RM_PODMAN[@]}" build -q --pull=never --network host "${RM_ULIMITS[@]}" --layers \
    -f "$file" "${tgt[@]}" -t "$tag" "$ctx" >/dev/null
  # non-root, read-only root filesystem: the image's own --help must work that way
  case "$t" in
    operator)   who=$(run_ro --entrypoint id "$tag" -u); run_ro "$tag" --help >/dev/null ;;
    worker-cpu) who=$(run_ro --entrypoint id "$tag" -u); run_ro "$tag" train --help >/dev/null ;;
    torch|torch-elastic) who=$(run_ro --entrypoint id "$tag" -u); run_ro --entrypoint python3 "$tag" -c 'import torch.distributed' ;;
  esac
  [ "$who" = 65532 ] || { echo "images: $tag runs as UID $who, not 65532" >&2; exit 1; }
  size=$("${RM_PODMAN[@]}" image inspect --format '{{.Size}}' "$tag")
  printf 'images: %-28s %6d MB  uid %s  read-only root ok  (%d s)\n' "$tag" $(( size / 1000000 )) "$who" $(( $(date +%s) - start ))
done
