#!/usr/bin/env bash
# `make install PREFIX=...` (the step the Dockerfile runs) installs binaries that work from the
# prefix alone: the installed `ringmaster run` finds the installed worker next to itself and trains.
set -euo pipefail
root="$RM_ROOT"; tmp="$TMPDIR"
prefix="$tmp/prefix"
make -C "$root" -s install PREFIX="$prefix" >/dev/null
for f in bin/ringmaster bin/ringmaster-worker share/ringmaster/deploy/crd/trainingjobs.ringmaster.dev.yaml \
         share/ringmaster/deploy/examples/fashion-mnist.yaml; do
  [ -e "$prefix/$f" ] || { echo "missing $prefix/$f"; exit 1; }
done
# a DESTDIR install stages under DESTDIR (what the Dockerfile copies from)
make -C "$root" -s install PREFIX=/usr/local DESTDIR="$tmp/stage" >/dev/null
[ -x "$tmp/stage/usr/local/bin/ringmaster" ] || { echo "DESTDIR install missing"; exit 1; }

"$prefix/bin/ringmaster" version
# the kubectl plugin is the same binary under kubectl's plugin names
"$prefix/bin/kubectl-ringmaster" --help | grep -q '^usage: kubectl ringmaster <command>' ||
  { echo "kubectl-ringmaster is not the plugin"; exit 1; }
[ "$("$prefix/bin/kubectl_complete-ringmaster" sta)" = status ] || { echo "kubectl_complete-ringmaster"; exit 1; }
"$prefix/bin/ringmaster" validate -f "$prefix/share/ringmaster/deploy/examples/fashion-mnist.yaml"
# the operator binary must not need the worker's math or CUDA libraries (the slim operator image lacks them)
if ldd "$prefix/bin/ringmaster" | grep -E 'openblas|libmpi|cuda|nccl|cublas'; then
  echo "ringmaster links libraries the operator image does not ship"; exit 1
fi
cat > "$tmp/tiny.yaml" <<'YAML'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: install-check}
spec:
  replicas: 2
  checkpoint: {intervalSteps: 50}
  training:
    model: {type: mlp, hidden: [32]}
    epochs: 1
    maxSteps: 60
    batchSizePerWorker: 64
YAML
cd "$tmp"
"$prefix/bin/ringmaster" run -f "$tmp/tiny.yaml" -o json --checkpoint-dir "$tmp/ckpt" > "$tmp/out.json"
tail -n 1 "$tmp/out.json" | /usr/bin/python3 -c '
import json, sys
tj = json.loads(sys.stdin.read())
assert tj["status"]["phase"] == "Succeeded", tj["status"]
assert tj["status"]["result"]["steps"] >= 60, tj["status"]["result"]
print("installed run succeeded:", tj["status"]["result"])'
