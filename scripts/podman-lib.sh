# podman-lib.sh — sourced by scripts/images.sh and the container tests. How ringmaster drives podman
# on its machines (Debian 12 hosts, root, hybrid cgroups):
#  - runc, not crun (crun refuses "cgroups in hybrid mode");
#  - rlimits low enough that the container may set them (nproc 65536 is refused there);
#  - the Debian base images (docker.io/library/debian:12 and :12-slim) are made with mmdebstrap
#    from the apt mirror when missing, never pulled from a registry (builds use --pull=never).
RM_PODMAN_RUNTIME=${RM_PODMAN_RUNTIME:-runc}
RM_PODMAN=(podman --runtime "$RM_PODMAN_RUNTIME")
RM_ULIMITS=(--ulimit nofile=16384:16384 --ulimit nproc=16384:16384)
RM_DEBIAN_MIRROR=${RM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
RM_DEBIAN_SECURITY=${RM_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
RM_BASE_IMAGE=docker.io/library/debian:12
RM_BASE_SLIM=docker.io/library/debian:12-slim

# rm_podman_why_not: prints why podman cannot run containers here (empty output and status 0 when it can).
rm_podman_why_not() {
  command -v podman >/dev/null 2>&1 || { echo "podman is not installed (Debian packages podman runc; make deps-images)"; return 1; }
  command -v "$RM_PODMAN_RUNTIME" >/dev/null 2>&1 || { echo "$RM_PODMAN_RUNTIME is not installed (Debian package $RM_PODMAN_RUNTIME)"; return 1; }
  # (/run/.containerenv: inside a podman container. Not /.dockerenv: the project's own machines are
  #  privileged Docker containers in which podman works.)
  if [ -e /run/.containerenv ]; then
    echo "this is itself a podman container (nested podman is not set up: make test-fresh runs the tests this way)"; return 1
  fi
  local out
  out=$("${RM_PODMAN[@]}" info --format '{{.Host.OCIRuntime.Name}}' 2>&1) || { echo "podman info failed: ${out##*$'\n'}"; return 1; }
  return 0
}

# rm_ensure_base: the Debian base images, made with mmdebstrap when missing (cached in podman's store).
rm_ensure_base() {
  if "${RM_PODMAN[@]}" image exists "$RM_BASE_IMAGE" && "${RM_PODMAN[@]}" image exists "$RM_BASE_SLIM"; then
    return 0
  fi
  command -v mmdebstrap >/dev/null 2>&1 || { echo "images: mmdebstrap is not installed (make deps-images)" >&2; return 1; }
  local dir tar start
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rm-base.XXXXXX"); tar="$dir/debian-12.tar"; start=$(date +%s)
  echo "images: making the Debian 12 base with mmdebstrap (apt variant, no docs/man/locales, like -slim)" >&2
  mmdebstrap --quiet --variant=apt \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tar" "deb $RM_DEBIAN_MIRROR bookworm main" "deb $RM_DEBIAN_MIRROR bookworm-updates main" \
    "deb $RM_DEBIAN_SECURITY bookworm-security main" >&2 || { rm -rf "$dir"; return 1; }
  "${RM_PODMAN[@]}" import -q "$tar" "$RM_BASE_IMAGE" >/dev/null && "${RM_PODMAN[@]}" tag "$RM_BASE_IMAGE" "$RM_BASE_SLIM"
  local rc=$?
  rm -rf "$dir"
  echo "images: base made in $(( $(date +%s) - start )) s" >&2
  return $rc
}
