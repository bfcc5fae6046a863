#!/usr/bin/env bash
# 12-build-config: the fresh-machine trap (docs/architecture.md#building-on-a-fresh-machine).
# Package-dependent flags are computed by scripts/configure.sh on every make, into
# $(BUILDDIR)/config.mk, and objects depend on it:
#  1. with Open MPI "not installed" (a PKG_CONFIG_LIBDIR holding every .pc file but Open MPI's)
#     a build fails loudly naming libopenmpi-dev — never a worker without the mpi backend;
#  2. `MPI=0` builds without it on purpose (the object has no MPI symbols);
#  3. "installing" Open MPI (adding its .pc files) rebuilds the object with MPI on the next make,
#     with no `make clean`; and a further make rebuilds nothing.
# Builds one object into a private BUILDDIR, so it takes seconds and leaves build/ alone.
set -euo pipefail
root=${RM_ROOT:?}
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config (Debian package pkg-config; run make deps)"; exit 0; }
pkg-config --exists ompi-c || { echo "SKIP: Open MPI is not installed here (libopenmpi-dev)"; exit 0; }
pcdir=$(pkg-config --variable=pcfiledir ompi-c)
fake="$TMPDIR/pc"; mkdir -p "$fake"
for f in "$pcdir"/*.pc /usr/share/pkgconfig/*.pc; do
  case "$(basename "$f")" in ompi*|mpi*|orte*) ;; *) ln -sf "$f" "$fake/" ;; esac
done
export PKG_CONFIG_LIBDIR="$fake" PKG_CONFIG_PATH=""
B="$TMPDIR/b"; OBJ="$B/worker/comm/comm_mpi.o"
mk() { make -C "$root" --no-print-directory BUILDDIR="$B" BINDIR="$B/bin" CUDA=0 "$@"; }

echo "== 1. Open MPI missing: the build must fail and name the package"
if out=$(mk "$OBJ" 2>&1); then echo "$out"; echo "FAIL: built without Open MPI and without MPI=0"; exit 1; fi
echo "$out" | tail -3
grep -q "libopenmpi-dev" <<<"$out" || { echo "FAIL: the error does not name libopenmpi-dev"; exit 1; }
grep -q "make deps" <<<"$out" || { echo "FAIL: the error does not say to run make deps"; exit 1; }
[ ! -e "$OBJ" ] || { echo "FAIL: an object was built anyway"; exit 1; }

echo "== 2. MPI=0 builds without the backend, on purpose"
mk MPI=0 "$OBJ" >/dev/null
grep -q '^MPI_ON := 0' "$B/config.mk"
if nm "$OBJ" | grep -q ' U MPI_'; then echo "FAIL: MPI=0 object references MPI"; exit 1; fi

echo "== 3. Open MPI appears: the next make rebuilds the object with it"
for f in "$pcdir"/ompi*.pc "$pcdir"/mpi*.pc "$pcdir"/orte*.pc; do [ -e "$f" ] && ln -sf "$f" "$fake/"; done
before=$(stat -c %Y.%N "$OBJ" 2>/dev/null; md5sum < "$OBJ")
sleep 1
out=$(mk "$OBJ" 2>&1)
echo "$out" | grep -E 'configure:|comm_mpi' | head -3
grep -q '^MPI_ON := 1' "$B/config.mk" || { echo "FAIL: config.mk did not pick up Open MPI"; cat "$B/config.mk"; exit 1; }
[ "$before" != "$(stat -c %Y.%N "$OBJ"; md5sum < "$OBJ")" ] || { echo "FAIL: object not rebuilt"; exit 1; }
nm "$OBJ" | grep -q ' U MPI_Allreduce' || { echo "FAIL: rebuilt object has no MPI_Allreduce"; exit 1; }

echo "== 4. nothing changed: nothing rebuilt, config.mk untouched"
cfg_before=$(stat -c %Y "$B/config.mk"); obj_before=$(stat -c %Y "$OBJ")
sleep 1
out=$(mk "$OBJ" 2>&1)
grep -q "is up to date" <<<"$out" || { echo "$out"; echo "FAIL: a make with nothing changed did work"; exit 1; }
[ "$cfg_before" = "$(stat -c %Y "$B/config.mk")" ] && [ "$obj_before" = "$(stat -c %Y "$OBJ")" ] \
  || { echo "FAIL: config.mk or the object was rewritten"; exit 1; }
echo "build config ok"
