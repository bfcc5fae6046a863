#!/usr/bin/env bash
# The Helm chart and deploy/ pass the static checks, and the checker really catches breakage:
# a values file that violates the schema, and a template that uses an undefined value, must fail.
set -euo pipefail
root="$RM_ROOT"
py=/usr/bin/python3
$py "$root/tests/packaging/check_chart.py" "$root"

bad="$TMPDIR/bad-values.yaml"
sed 's/^replicaCount: 2/replicaCount: "two"/' "$root/charts/ringmaster/values.yaml" > "$bad"
if $py "$root/tests/packaging/check_chart.py" "$root" --values "$bad" > "$TMPDIR/out" 2>&1; then
  echo "schema violation was not caught"; exit 1
fi
grep -q "replicaCount" "$TMPDIR/out"

# a copy of the chart whose template references a value that does not exist
copy="$TMPDIR/repo"; mkdir -p "$copy"
cp -r "$root/deploy" "$root/charts" "$copy/"
cp -L "$root/charts/ringmaster/crds/trainingjobs.ringmaster.dev.yaml" "$copy/charts/ringmaster/crds/" 2>/dev/null || true
rm -f "$copy/deploy/10-crd.yaml"
echo '{{ .Values.notThere.x }}' >> "$copy/charts/ringmaster/templates/service.yaml"
if $py "$root/tests/packaging/check_chart.py" "$copy" > "$TMPDIR/out2" 2>&1; then
  echo "undefined template value was not caught"; exit 1
fi
grep -q "notThere.x" "$TMPDIR/out2"
echo "chart checks and their negative controls passed"
