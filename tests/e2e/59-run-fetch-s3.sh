#!/usr/bin/env bash
# README "Failure semantics" row F11.
# ringmaster run with data from S3 (common/fetch.h; docs/models-and-data.md, "Where data comes
# from"): tinyshakespeare as a folder of token shards (`ringmaster tokenize`: two train, one val) in
# npm's s3rver on loopback, listed with ListObjectsV2 (other objects left out) and fetched with
# libcurl's SigV4, path-style against AWS_ENDPOINT_URL with a Secret-style
# credential pair and a session token; the GPT trains on it and its validation loss falls below
# the uniform ln 256. An unknown access key and a missing key end Failed/DataError in seconds.
# (s3rver 3.7 checks the access key id but not the SigV4 signature itself; a wrong secret's
# "signature rejected" is proven in tests/unit/test_fetch.c against a server that verifies it.)
source "$(dirname "$0")/5x-run-lib.bash"
S3RVER="$RM_ROOT/tests/s3/node_modules/.bin/s3rver"
[ -x "$S3RVER" ] || fail "no s3rver at $S3RVER: run make deps (it installs tests/s3 with npm)"
S3_PID=""
trap 'rc=$?; [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null; (exit $rc); cleanup' EXIT

P=$(free_port)
mkdir -p "$W/s3"
node "$S3RVER" -d "$W/s3" -a 127.0.0.1 -p "$P" --configure-bucket data -s >"$W/s3rver.log" 2>&1 &
S3_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$P/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_SESSION_TOKEN=session-token-1 \
       AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$P" RINGMASTER_DATA_CACHE="$W/cache"
s3put() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
               -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1" "http://127.0.0.1:$P/data/$2"; }

# a folder of shards: two training shards and a validation one, beside objects the listing leaves
# out (not a shard; a deeper "folder")
"$RM_BIN/ringmaster" tokenize --val-fraction 0.1 --shard-tokens 600000 --name tiny \
  "$RM_ROOT/datasets/tinyshakespeare/input.txt" "$W/tok" >"$W/tok.out" || fail "tokenize"
SHARDS="tiny_train_000000.bin tiny_train_000001.bin tiny_val_000000.bin"
for f in $SHARDS; do
  [ -s "$W/tok/$f" ] || fail "tokenize wrote no $f: $(ls "$W/tok")"
  s3put "$W/tok/$f" "tiny/$f" || fail "upload $f to s3rver"
done
echo "not data" >"$W/readme.txt"
s3put "$W/readme.txt" tiny/README.txt && s3put "$W/tok/tiny_val_000000.bin" tiny/old/tiny_train_000009.bin ||
  fail "upload to s3rver"
SUM=$(cd "$W/tok" && cat $SHARDS | sha256sum | cut -c1-64)
BYTES=$(cd "$W/tok" && cat $SHARDS | wc -c)

job() { # NAME URI [SHA]
  sed -e "s|uri: builtin:tinyshakespeare|uri: \"$2\"${3:+\n      sha256: \"$3\"}|; s/format: text/format: tokens/" \
      -e "s/maxSteps: 4000/maxSteps: 60/; s/evalEverySteps: 500/evalEverySteps: 30/; s/warmupSteps: 100/warmupSteps: 10/" \
      -e "s/maxRestarts: 3/maxRestarts: 3/; s/name: shakespeare-gpt/name: $1/" \
      "$RM_ROOT/deploy/examples/shakespeare-gpt.yaml" >"$W/$1.yaml"
}
job s3gpt "s3://data/tiny/" "$SUM"
run_job s3gpt -f "$W/s3gpt.yaml" -o json
[ "$RC" -eq 0 ] || fail "GPT on S3 data: exit $RC"
[ "$(jget s3gpt 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
vl=$(jget s3gpt 'j["status"]["result"]["valLoss"]')
$PY -c "import sys; sys.exit(0 if 0 < $vl < 4.0 else 1)" || fail "valLoss $vl (uniform is 5.55)"
grep -q 'msg="data fetched" uri=s3://data/tiny/ ' "$W"/run-s3gpt/worker-*.log ||
  fail "no worker logged the S3 fetch"
grep -q 'msg="fetch: listed" url=s3://data/tiny/ files=3 ' "$W"/run-s3gpt/worker-*.log ||
  fail "the listing did not name the 3 shards: $(grep -h 'listed' "$W"/run-s3gpt/worker-*.log)"
[ "$(cd "$W"/cache/*-"$SUM" && ls | tr '\n' ' ')" = "$SHARDS " ] ||
  fail "the cache entry holds $(ls "$W"/cache/*-"$SUM") (want the 3 shards)"
# status.data: the whole folder's bytes, as the fetching worker reported them
[ "$(jget s3gpt '"%s %d %d" % (j["status"]["data"]["uri"], j["status"]["data"]["bytes"], j["status"]["data"]["totalBytes"])')" = \
  "s3://data/tiny/ $BYTES $BYTES" ] || fail "status.data: $(jget s3gpt 'j["status"].get("data")') (want $BYTES bytes)"
! grep -q "S3RVER\|session-token-1" "$W"/run-s3gpt/worker-*.log "$W/s3gpt.out" || fail "a credential reached a log"
log "GPT on an s3:// folder of 3 token shards ($BYTES bytes): valLoss=$vl"

expect_data_error() { # NAME MESSAGE_REGEX
  local t0=$SECONDS
  run_job "$1" -f "$W/$1.yaml" -o json
  local took=$(( SECONDS - t0 ))
  [ "$RC" -eq 1 ] || fail "$1: exit $RC (want 1)"
  [ "$(jget "$1" '[c["reason"] for c in j["status"]["conditions"] if c["type"]=="Failed"][0]')" = DataError ] ||
    fail "$1: not DataError: $(jget "$1" 'j["status"]["conditions"]')"
  [ "$(jget "$1" 'j["status"].get("restarts", 0)')" = 0 ] || fail "$1: restarts spent"
  local msg; msg=$(jget "$1" 'j["status"]["message"]')
  echo "$msg" | grep -Eq "$2" || fail "$1: message \"$msg\" does not match /$2/"
  [ "$took" -le 15 ] || fail "$1: took ${took}s"
  log "$1: DataError in ${took}s: $msg"
}
export RINGMASTER_DATA_CACHE="$W/cache-bad"
job nokey "s3://data/tiny/nope.bin"
expect_data_error nokey '^spec\.training\.data\.uri: 404 from s3://data/tiny/nope\.bin: no such key$'
job badid "s3://data/tiny/tiny_train_000000.bin"
AWS_ACCESS_KEY_ID=WRONG-ID expect_data_error badid '^spec\.training\.data\.uri: 403 from s3://data/tiny/tiny_train_000000\.bin: unknown access key$'
assert_no_workers
log "PASS"
