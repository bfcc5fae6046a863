#!/usr/bin/env bash
# 69-operator-output: spec.output and status.result.model through the operator (kubesim, real
# kubectl; docs/models-and-data.md, "Shapes and status"). A 2-worker job with output.uri a folder
# Succeeds with model.safetensors + config.json there and status.result.model {uri, sha256, bytes}
# agreeing with sha256sum and the file's size; a job whose output folder cannot be written (it
# lies under a file) still Succeeds, with the condition ExportFailing (reason ExportFailed, the
# worker's message naming spec.output.uri) and a Warning event ExportFailing; its checkpoints stay.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"

HIDDEN=32
OUT="$T/models/op"
: >"$T/afile"
{ fast_job good 2 1; echo "  output: {uri: \"$OUT\", dtype: float32}"; } | k apply -f - >/dev/null
{ fast_job bad 2 1; echo "  output: {uri: \"$T/afile/out\"}"; } | k apply -f - >/dev/null
wait_for 120 "good Succeeded" tj_phase_is good Succeeded
wait_for 120 "bad Succeeded" tj_phase_is bad Succeeded

[ -s "$OUT/model.safetensors" ] && [ -s "$OUT/config.json" ] || fail "no export in $OUT: $(ls -la "$OUT" 2>&1)"
[ "$(tj_field good '{.status.result.model.uri}')" = "$OUT/model.safetensors" ] || fail "model.uri: $(tj_field good '{.status.result}')"
[ "$(tj_field good '{.status.result.model.sha256}')" = "$(sha256sum "$OUT/model.safetensors" | cut -c1-64)" ] || fail "model.sha256"
[ "$(tj_field good '{.status.result.model.bytes}')" = "$(stat -c %s "$OUT/model.safetensors")" ] || fail "model.bytes"
[ -z "$(tj_field good '{.status.conditions[?(@.type=="ExportFailing")].status}')" ] || fail "good: ExportFailing set"
log "good: $(tj_field good '{.status.result.model}')"

[ "$(tj_field bad '{.status.conditions[?(@.type=="ExportFailing")].status}')" = True ] ||
  fail "bad: no ExportFailing: $(tj_field bad '{.status.conditions}')"
[ "$(tj_field bad '{.status.conditions[?(@.type=="ExportFailing")].reason}')" = ExportFailed ] || fail "bad: reason"
msg=$(tj_field bad '{.status.conditions[?(@.type=="ExportFailing")].message}')
echo "$msg" | grep -q "^spec.output.uri: .*afile/out" || fail "bad: message $msg"
[ -z "$(tj_field bad '{.status.result.model.uri}')" ] || fail "bad: a model reported"
ls "$T/ckpt/default/bad" | grep -q '^ckpt-' || fail "bad: checkpoints gone"
k get events -o json | $PY -c '
import json,sys
ev=[e for e in json.load(sys.stdin)["items"] if e.get("reason")=="ExportFailing"]
assert ev and ev[0].get("type")=="Warning", ev
assert ev[0].get("involvedObject",ev[0].get("regarding",{})).get("name")=="bad", ev
' || fail "no ExportFailing Warning event for bad"
log "bad: Succeeded + ExportFailing: $msg"
log "PASS"
