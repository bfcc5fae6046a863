#!/usr/bin/env bash
# spec.output and status.result.model (docs/models-and-data.md, "Exported models", "Shapes and
# status"): a short MLP job exports to spec.output.uri — a local folder (each file written
# atomically), and s3://models/run-1/ on npm's s3rver (loopback), uploaded in parts (the part size
# forced down to 64 KiB by RINGMASTER_UPLOAD_PART_BYTES, so the ~200 KB model is a multipart
# upload); status.result.model {uri, sha256, bytes} describes model.safetensors (sha256sum agrees;
# the object downloaded back equals the staged export byte for byte). An output that cannot be
# written (a folder under a file; an S3 key id the store refuses) leaves the job Succeeded with
# the condition ExportFailing and a Warning event naming spec.output.uri, the checkpoints kept and
# no credential in any log.
source "$(dirname "$0")/5x-run-lib.bash"
S3RVER="$RM_ROOT/tests/s3/node_modules/.bin/s3rver"
[ -x "$S3RVER" ] || fail "no s3rver at $S3RVER: run make deps (it installs tests/s3 with npm)"
S3_PID=""
trap 'rc=$?; [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null; (exit $rc); cleanup' EXIT

# job NAME OUTPUT_URI [DTYPE]
job() {
  cat >"$W/$1.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 0, backoffSeconds: 0.2, progressDeadlineSeconds: 30}
  checkpoint: {intervalSteps: 1000}
  training:
    mode: train
    dataset: fashion-mnist
    model: {type: mlp, hidden: [64]}
    epochs: 1
    maxSteps: 30
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 0
  output: {uri: "$2", format: safetensors, dtype: ${3:-float32}}
EOF
}
sha() { sha256sum "$1" | cut -c1-64; }
bytes() { stat -c %s "$1"; }

# 1. a local folder
OUT="$W/models/run-1"
job loc "$OUT"
run_job loc -f "$W/loc.yaml" -o json
[ "$RC" -eq 0 ] || fail "local output: exit $RC"
[ -s "$OUT/model.safetensors" ] && [ -s "$OUT/config.json" ] || fail "no export in $OUT: $(ls -la "$OUT" 2>&1)"
[ ! -e "$W/ck-loc/export" ] || fail "the default export folder was written too"
[ -z "$(ls -A "$OUT" | grep -v '^model.safetensors$\|^config.json$')" ] || fail "leftovers in $OUT: $(ls -A "$OUT")"
[ "$(jget loc 'j["status"]["result"]["model"]["uri"]')" = "$OUT/model.safetensors" ] || fail "model.uri: $(jget loc 'j["status"]["result"]')"
[ "$(jget loc 'j["status"]["result"]["model"]["sha256"]')" = "$(sha "$OUT/model.safetensors")" ] || fail "model.sha256"
[ "$(jget loc 'j["status"]["result"]["model"]["bytes"]')" = "$(bytes "$OUT/model.safetensors")" ] || fail "model.bytes"
log "local: $(jget loc 'j["status"]["result"]["model"]')"

# bfloat16 halves the weights (the header aside)
job bf "file://$W/models/bf16" bfloat16
run_job bf -f "$W/bf.yaml" -o json
[ "$RC" -eq 0 ] || fail "bfloat16 output: exit $RC"
$PY - "$RM_ROOT/tests/py" "$W/models/bf16/model.safetensors" <<'PY' || fail "the bfloat16 export"
import json, struct, sys
h = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", h[:8])[0]
hdr = json.loads(h[8:8 + n])
assert all(v["dtype"] == "BF16" for k, v in hdr.items() if k != "__metadata__"), hdr
PY

# 2. s3:// on s3rver, multipart
P=$(free_port)
mkdir -p "$W/s3"
node "$S3RVER" -d "$W/s3" -a 127.0.0.1 -p "$P" --configure-bucket models -s >"$W/s3rver.log" 2>&1 &
S3_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$P/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_SESSION_TOKEN=session-token-1 \
       AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$P" \
       RINGMASTER_UPLOAD_MULTIPART_BYTES=65536 RINGMASTER_UPLOAD_PART_BYTES=65536
s3get() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
               -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -o "$2" "http://127.0.0.1:$P/models/$1"; }
job s3 "s3://models/run-1/"
run_job s3 -f "$W/s3.yaml" -o json
[ "$RC" -eq 0 ] || fail "s3 output: exit $RC"
ST="$W/ck-s3/export/model.safetensors"   # staged beside the checkpoints, then uploaded
s3get run-1/model.safetensors "$W/got.safetensors" || fail "model.safetensors not in the bucket"
s3get run-1/config.json "$W/got.json" || fail "config.json not in the bucket"
cmp "$W/got.safetensors" "$ST" || fail "the uploaded weights differ from the export"
cmp "$W/got.json" "$W/ck-s3/export/config.json" || fail "the uploaded config differs"
[ "$(jget s3 'j["status"]["result"]["model"]["uri"]')" = "s3://models/run-1/model.safetensors" ] || fail "s3 model.uri"
[ "$(jget s3 'j["status"]["result"]["model"]["sha256"]')" = "$(sha "$W/got.safetensors")" ] || fail "s3 model.sha256"
[ "$(jget s3 'j["status"]["result"]["model"]["bytes"]')" = "$(bytes "$W/got.safetensors")" ] || fail "s3 model.bytes"
parts=$(grep -ho 'msg="model exported".* parts=[0-9]*' "$W"/run-s3/worker-*.log | grep -o 'parts=[0-9]*' | cut -d= -f2)
want=$(( ($(bytes "$ST") + 65535) / 65536 ))
[ "$parts" = "$want" ] && [ "$want" -ge 3 ] || fail "parts=$parts, want $want (a multipart upload)"
log "s3: $(bytes "$ST") bytes in $parts parts, sha256 $(sha "$ST")"

# 3. outputs that cannot be written: Succeeded, ExportFailing, a Warning event, checkpoints kept
expect_export_failing() { # NAME MESSAGE_REGEX
  run_job "$1" -f "$W/$1.yaml" -o json
  [ "$RC" -eq 0 ] || fail "$1: exit $RC (the training succeeded)"
  [ "$(jget "$1" 'j["status"]["phase"]')" = Succeeded ] || fail "$1: phase $(jget "$1" 'j["status"]["phase"]')"
  local c; c=$(jget "$1" '[(c["status"], c["reason"], c["message"]) for c in j["status"]["conditions"] if c["type"]=="ExportFailing"]')
  echo "$c" | grep -q "'True', 'ExportFailed'" || fail "$1: no ExportFailing condition: $c"
  local msg; msg=$(jget "$1" '[c["message"] for c in j["status"]["conditions"] if c["type"]=="ExportFailing"][0]')
  echo "$msg" | grep -Eq "$2" || fail "$1: message \"$msg\" does not match /$2/"
  local ev; ev=$(grep -m1 'reason=ExportFailing' "$W/$1.err") || fail "$1: no ExportFailing event: $(grep -i event "$W/$1.err" | tail -3)"
  echo "$ev" | grep -q 'level=warn' || fail "$1: the event is not a warning: $ev"
  log "$1: event: $ev"
  [ -z "$(jget "$1" 'j["status"]["result"].get("model", "")')" ] || fail "$1: a model reported"
  ls "$W/ck-$1"/ckpt-* >/dev/null 2>&1 || ls -R "$W/ck-$1" | grep -q ckpt || fail "$1: checkpoints gone: $(ls -la "$W/ck-$1")"
  ! grep -q "S3RVER\|session-token-1\|WRONG-ID-SECRET" "$W"/run-"$1"/worker-*.log "$W/$1.out" "$W/$1.err" || fail "$1: a credential reached a log"
  log "$1: Succeeded + ExportFailing: $msg"
}
: >"$W/afile"
job unw "$W/afile/out"
expect_export_failing unw '^spec\.output\.uri: .*afile/out'
job deny "s3://models/run-2/"
AWS_ACCESS_KEY_ID=WRONG-ID expect_export_failing deny '^spec\.output\.uri: 403 from s3://models/run-2/model\.safetensors: unknown access key$'
assert_no_workers
log "PASS"
