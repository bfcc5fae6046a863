#!/usr/bin/env bash
# 30-worker-single.sh — one ringmaster-worker alone (world 1, no rendezvous):
#  1. bad flag -> exit 2 with usage; missing or corrupt data -> exit 3 (the data's fault: the
#     controllers' DataError) with a clear error, also written to RINGMASTER_TERMINATION_LOG;
#  2. trains ~1 epoch (--max-steps 940) to a sane test accuracy (>= 0.80), writing checkpoints,
#     serving /metrics, /healthz and /readyz on a port it picks;
#  3. resumes from its newest checkpoint and continues to step 1100, ending bit-identical
#     (params_fnv64) to an uninterrupted 1100-step run (a constant schedule: a cosine spans the
#     maxSteps budget, so runs with different budgets follow different learning rates);
#  4. a truncated newest checkpoint is skipped (older one used) and left in place;
#  5. SIGTERM mid-run writes a checkpoint and exits 0.
set -euo pipefail
W="$RM_BIN/ringmaster-worker"
T="${TMPDIR:-/tmp}/e2e30.$$"
mkdir -p "$T"
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
fnv() { grep -o 'params_fnv64=[0-9a-f]*' "$1" | tail -1 | cut -d= -f2; }
# expect_exit WANT_RC OUTFILE WHAT CMD...: run CMD (stdout+stderr to OUTFILE), fail unless it exits WANT_RC
expect_exit() {
  local want=$1 out=$2 what=$3 rc; shift 3
  set +e; "$@" >"$out" 2>&1; rc=$?; set -e
  [ "$rc" -eq "$want" ] || fail "$what exit $rc, want $want"
}

echo "--- bad flag"
expect_exit 2 "$T/bad.out" "bad flag" "$W" train --no-such-flag
grep -q "unknown flag --no-such-flag" "$T/bad.out" || fail "no clear message for a bad flag"
grep -q "usage: ringmaster-worker train" "$T/bad.out" || fail "no usage on a bad flag"

echo "--- missing data"
RINGMASTER_TERMINATION_LOG="$T/nodata.term" \
  expect_exit 3 "$T/nodata.out" "missing data" "$W" train --data-dir "$T/nodata" --metrics-addr off
grep -q "missing" "$T/nodata.out" || fail "no clear message for missing data"
grep -q "missing" "$T/nodata.term" || fail "no termination message for missing data: $(cat "$T/nodata.term" 2>&1)"

echo "--- corrupt data"
mkdir -p "$T/bad-data"
cp /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz "$T/bad-data/"
cp /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz "$T/bad-data/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz >"$T/bad-data/train-images-idx3-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz "$T/bad-data/"
expect_exit 3 "$T/baddata.out" "corrupt data" "$W" train --data-dir "$T/bad-data" --metrics-addr off
grep -q "train-images-idx3-ubyte.gz" "$T/baddata.out" || fail "corrupt data error does not name the file"

echo "--- one epoch with checkpoints and metrics"
CK="$T/ck"
"$W" train --max-steps 940 --schedule constant --checkpoint-dir "$CK" --checkpoint-interval 300 \
    --metrics-addr 127.0.0.1:0 >"$T/run1.out" 2>&1 &
p=$!; pids+=("$p")
port=""
for _ in $(seq 1 100); do
  port=$(grep -o 'msg="metrics listening" port=[0-9]*' "$T/run1.out" 2>/dev/null | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && break; sleep 0.1
done
[ -n "$port" ] || fail "worker did not report its metrics port"
# scrape while it trains (it may finish quickly; tolerate that)
for _ in $(seq 1 100); do
  if curl -sf "http://127.0.0.1:$port/metrics" >"$T/metrics.txt" 2>/dev/null && grep -Eq '^ringmaster_worker_step\{.*\} [1-9]' "$T/metrics.txt"; then
    curl -sf "http://127.0.0.1:$port/healthz" >"$T/healthz.txt" || true
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" >"$T/readyz.txt" || true
    break
  fi
  sleep 0.05
done
wait "$p" || fail "training run failed: $(tail -5 "$T/run1.out")"
grep -q 'msg="training done" steps=940' "$T/run1.out" || fail "no done line"
acc=$(grep -o 'test_accuracy=[0-9.]*' "$T/run1.out" | tail -1 | cut -d= -f2)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.80)}' || fail "accuracy $acc < 0.80 after ~1 epoch"
echo "accuracy after 940 steps: $acc"
if [ -s "$T/metrics.txt" ]; then
  for m in ringmaster_worker_step ringmaster_worker_loss ringmaster_worker_samples_total \
           ringmaster_worker_epoch ringmaster_worker_restarts_total ringmaster_worker_allreduce_seconds_bucket \
           ringmaster_worker_checkpoint_seconds_bucket ringmaster_worker_last_checkpoint_step; do
    grep -q "^$m{.*job=\"default/local\".*rank=\"0\"" "$T/metrics.txt" || fail "metric $m missing or unlabelled"
  done
  grep -q '"ok"' "$T/healthz.txt" || fail "healthz not ok while training: $(cat "$T/healthz.txt")"
  [ "$(cat "$T/readyz.txt")" = "200" ] || fail "readyz $(cat "$T/readyz.txt") while training"
  echo "scraped /metrics, /healthz, /readyz while training"
else
  echo "note: run finished before a scrape; metrics checked by unit tests"
fi
ls "$CK"/ckpt-000000000600.rmck "$CK"/ckpt-000000000900.rmck "$CK"/ckpt-000000000940.rmck >/dev/null \
  || fail "expected checkpoints at 600/900/940: $(ls "$CK")"
[ ! -e "$CK"/ckpt-000000000300.rmck ] || fail "keep=3 should have pruned step 300"
ls -A "$CK" | grep -q '^\.tmp' && fail "temp files left behind"

echo "--- resume to 1100, bit-identical to a straight run"
"$W" train --max-steps 1100 --schedule constant --checkpoint-dir "$CK" --checkpoint-interval 300 --metrics-addr off >"$T/run2.out" 2>&1 \
  || fail "resume failed"
grep -q "checkpoint loaded.*step=940" "$T/run2.out" || fail "did not resume from step 940"
"$W" train --max-steps 1100 --schedule constant --metrics-addr off >"$T/straight.out" 2>&1 || fail "straight run failed"
a=$(fnv "$T/run2.out"); b=$(fnv "$T/straight.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "resumed params $a != straight params $b"

echo "--- truncated newest checkpoint is skipped and kept"
newest=$(ls "$CK"/ckpt-*.rmck | sort | tail -1)
size=$(stat -c %s "$newest")
truncate -s 1000 "$newest"
"$W" train --max-steps 1150 --checkpoint-dir "$CK" --checkpoint-interval 0 --metrics-addr off >"$T/run3.out" 2>&1 \
  || fail "run after truncation failed"
grep -q "checkpoint skipped (invalid)" "$T/run3.out" || fail "truncated file not reported"
grep -q "checkpoint loaded.*step=940" "$T/run3.out" || fail "older checkpoint not used: $(grep checkpoint "$T/run3.out")"
[ "$(stat -c %s "$newest")" -eq 1000 ] || fail "the truncated file was modified"

echo "--- SIGTERM writes a checkpoint and exits 0"
CK2="$T/ck2"
"$W" train --epochs 3 --checkpoint-dir "$CK2" --checkpoint-interval 100000 --metrics-addr off >"$T/term.out" 2>&1 &
p=$!; pids+=("$p")
for _ in $(seq 1 100); do grep -q 'msg="progress"' "$T/term.out" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$p"
set +e; wait "$p"; rc=$?; set -e
[ "$rc" -eq 0 ] || fail "SIGTERM exit $rc, want 0"
grep -q "SIGTERM: writing a checkpoint" "$T/term.out" || fail "no SIGTERM checkpoint message"
ls "$CK2"/ckpt-*.rmck >/dev/null 2>&1 || fail "no checkpoint after SIGTERM"
echo "--- settings from RINGMASTER_TRAINING and from a TrainingJob file"
RINGMASTER_TRAINING='{"epochs":1,"batchSizePerWorker":32,"model":{"type":"mlp","hidden":[64]},"maxSteps":20}' \
  "$W" train --metrics-addr off >"$T/env.out" 2>&1 || fail "env settings run failed: $(tail -3 "$T/env.out")"
grep -q 'shape=784-64-10' "$T/env.out" || fail "RINGMASTER_TRAINING model not applied"
grep -q 'msg="training done" steps=20' "$T/env.out" || fail "RINGMASTER_TRAINING maxSteps not applied"
expect_exit 2 "$T/envbad.out" "invalid spec.training" \
  env RINGMASTER_TRAINING='{"epochs":0}' "$W" train --metrics-addr off
grep -q 'spec.training.epochs' "$T/envbad.out" || fail "invalid spec.training error does not name the field"
cat >"$T/job.yaml" <<'YAML'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: tiny}
spec:
  replicas: 1
  checkpoint: {intervalSteps: 7, keep: 2}
  training:
    model: {type: mlp, hidden: [32, 16]}
    batchSizePerWorker: 16
    maxSteps: 30
YAML
"$W" train --config "$T/job.yaml" --checkpoint-dir "$T/ck3" --metrics-addr off >"$T/cfg.out" 2>&1 \
  || fail "--config run failed: $(tail -3 "$T/cfg.out")"
grep -q 'shape=784-32-16-10' "$T/cfg.out" || fail "--config model not applied"
[ "$(ls "$T/ck3" | grep -c '^ckpt-')" -eq 2 ] || fail "--config checkpoint keep=2 not applied: $(ls "$T/ck3")"

echo "--- hang fault: progress stops, /healthz turns 503"
RINGMASTER_FAULT='hang:rank=0:step=30' RINGMASTER_PROGRESS_DEADLINE=1 \
  "$W" train --max-steps 100000 --metrics-addr 127.0.0.1:0 >"$T/hang.out" 2>&1 &
p=$!; pids+=("$p")
for _ in $(seq 1 100); do grep -q 'msg="fault injected" kind=hang' "$T/hang.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'msg="fault injected" kind=hang' "$T/hang.out" || fail "hang fault did not fire"
port=$(grep -o 'msg="metrics listening" port=[0-9]*' "$T/hang.out" | grep -o '[0-9]*$')
sleep 1.5
code=$(curl -s -o "$T/hz.txt" -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
[ "$code" = "503" ] || fail "/healthz $code after the hang, want 503"
expect_exit 1 "$T/fb.out" "bad RINGMASTER_FAULT" env RINGMASTER_FAULT='bogus' "$W" train --metrics-addr off
grep -q 'RINGMASTER_FAULT' "$T/fb.out" || fail "bad RINGMASTER_FAULT not rejected at start"
kill -TERM "$p"; wait "$p" || true
echo "PASS"
