#!/usr/bin/env bash
# 13-crd-docs: `kubectl explain` explains. Every field of the TrainingJob CRD has a description, all of
# them generated from scripts/crd-descriptions.yaml by scripts/crd-docs.py (`make crd-docs`):
#  1. an independent walk of the committed CRD's schema finds no field without a description;
#  2. the committed CRD is what the generator writes (not stale), and a second run changes nothing;
#  3. the generator rebuilds the committed CRD's schema from a copy with every description removed,
#     and leaves all other keys alone when a new keyword (maximum:) is added;
#  4. a new field without an entry, or an entry naming no field, fails the check with the field's path;
#  5. with kubectl: `kubectl explain tj.spec.restartPolicy.maxRestarts` against kubesim prints it.
set -euo pipefail
root=${RM_ROOT:?}; cd "$root"
PY=/usr/bin/python3
CRD=deploy/crd/trainingjobs.ringmaster.dev.yaml
fail() { echo "FAIL: $*"; exit 1; }

echo "== 1. walk the schema"
$PY - "$CRD" <<'P'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
n = 0; bad = []
def walk(node, path):
    global n
    for k, v in (node.get("properties") or {}).items():
        p = f"{path}.{k}" if path else k
        n += 1
        if not str(v.get("description", "")).strip(): bad.append(p)
        walk(v, p)
    if isinstance(node.get("items"), dict): walk(node["items"], path)
for ver in d["spec"]["versions"]:
    s = ver["schema"]["openAPIV3Schema"]
    if not str(s.get("description", "")).strip(): bad.append("(root)")
    walk(s, "")
assert n > 70, f"only {n} fields found: the walk is broken"
if bad: sys.exit("fields without a description: " + ", ".join(bad))
print(f"{n} fields, all described")
P

# the source lives outside deploy/: `kubectl apply -f deploy/crd/` (and -f deploy/) must find objects only
$PY -c 'import glob,sys,yaml; bad=[f for f in glob.glob("deploy/*.yaml")+glob.glob("deploy/crd/*.yaml") for d in yaml.safe_load_all(open(f)) if d and not ("apiVersion" in d and "kind" in d)]; sys.exit("not Kubernetes objects: %s" % bad if bad else 0)'

echo "== 2. not stale, idempotent"
$PY scripts/crd-docs.py --check || fail "the committed CRD is stale or incomplete"
cp "$CRD" "$TMPDIR/crd.yaml"
$PY scripts/crd-docs.py --crd "$TMPDIR/crd.yaml" >/dev/null
cmp "$CRD" "$TMPDIR/crd.yaml" || fail "a re-run changed the CRD"

echo "== 3. regenerated from nothing; other keys kept"
grep -v '^ *description: ' "$CRD" | sed -E 's/, description: "[^"]*"//' > "$TMPDIR/bare.yaml"
if sed -n '/openAPIV3Schema:/,$p' "$TMPDIR/bare.yaml" | grep -q description; then fail "stripping left schema descriptions"; fi
$PY scripts/crd-docs.py --crd "$TMPDIR/bare.yaml" >/dev/null || true
# printer columns keep their own descriptions, which the strip above removed: compare the schema part only
sed -n '/openAPIV3Schema:/,$p' "$CRD" > "$TMPDIR/want"; sed -n '/openAPIV3Schema:/,$p' "$TMPDIR/bare.yaml" > "$TMPDIR/got"
# (same content; a description written by hand before the generator existed may sit on another line)
$PY -c 'import sys,yaml; a,b=(yaml.safe_load(open(f)) for f in sys.argv[1:]); sys.exit(a!=b)' "$TMPDIR/want" "$TMPDIR/got" \
  || { diff "$TMPDIR/want" "$TMPDIR/got" | head; fail "regenerated schema differs"; }
sed 's/^\(  *\)minimum: 0$/\1minimum: 0\n\1maximum: 1000000/' "$CRD" > "$TMPDIR/max.yaml"
$PY scripts/crd-docs.py --crd "$TMPDIR/max.yaml" --check || fail "adding maximum: made the descriptions stale"
n_max=$(grep -c 'maximum: 1000000' "$TMPDIR/max.yaml")
cp "$TMPDIR/max.yaml" "$TMPDIR/max2.yaml"; $PY scripts/crd-docs.py --crd "$TMPDIR/max2.yaml" >/dev/null
cmp "$TMPDIR/max.yaml" "$TMPDIR/max2.yaml" || fail "the generator touched the added maximum: keys"
[ "$n_max" -gt 3 ] || fail "the maximum: mutation did not apply"

echo "== 4. undescribed fields and dangling entries are named"
sed 's/^\(  *\)maxSteps: {type: integer, minimum: 0.*$/&\n\1newKnob: {type: integer}/' "$CRD" > "$TMPDIR/new.yaml"
grep -q newKnob "$TMPDIR/new.yaml" || fail "mutation did not apply"
if out=$($PY scripts/crd-docs.py --crd "$TMPDIR/new.yaml" --check 2>&1); then fail "an undescribed field passed"; fi
grep -q "no description for field spec.training.newKnob" <<<"$out" || fail "not named: $out"
{ cat scripts/crd-descriptions.yaml; echo "spec.gone: a field that does not exist"; } > "$TMPDIR/desc.yaml"
if out=$($PY scripts/crd-docs.py --descriptions "$TMPDIR/desc.yaml" --check 2>&1); then fail "a dangling entry passed"; fi
grep -q "names spec.gone, which is not a field" <<<"$out" || fail "not named: $out"

echo "== 5. kubectl explain"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIP (part 5): kubectl is not installed (the real kubectl is not in Debian bookworm)"
else
  . "$root/tests/kubesim/testlib.sh"
  ks_start --no-kubelet
  k apply -f "$CRD" >/dev/null || fail "apply CRD"
  k wait --for condition=established crd/trainingjobs.ringmaster.dev --timeout=20s >/dev/null
  rm -rf "$KUBECACHEDIR"   # explain does not refresh a discovery cache taken before the CRD existed
  out=$(k explain tj.spec.restartPolicy.maxRestarts 2>&1) || fail "kubectl explain: $out"
  echo "$out"
  grep -q "Group restarts allowed before the job is Failed" <<<"$out" || fail "explain shows no description"
  out=$(k explain tj.status.conditions 2>&1)
  grep -q "<no description>" <<<"$out" && fail "explain still prints <no description>: $out"
  grep -q "Conditions of the job" <<<"$out" || fail "explain tj.status.conditions: $out"
fi
echo "crd docs ok"
