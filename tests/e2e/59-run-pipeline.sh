#!/usr/bin/env bash
# README "Failure semantics" row F4.
# e2e-timeout: 1100
# Pipeline stages (docs/strategies.md#pipeline-stages) with `ringmaster run`:
#  - bad spec.parallelism is a field-named validation error (exit 2);
#  - the math: after 100 steps a 2-stage pipeline with one micro-batch holds bit-for-bit the
#    parameters of the 1-stage run (params_fnv64), and GPipe and 1F1B with 4 micro-batches hold the
#    same parameters as each other; the same for 4 stages of a 4-layer model (60 steps, M = 8);
#  - a 2-stage job and a 2x2 job (2 stages x 2 data-parallel replicas) Succeed at accuracy within
#    0.3 points of the 1-stage runs with the same global batch; the workers export the pipeline
#    metrics and log the stage layout;
#  - a stage holds only its own layers: ringmaster_worker_memory_bytes{kind=params} (the memory
#    log line) is the stage's layer range, not the model's;
#  - checkpoints are per stage: each stage's replica 0 writes its layers, the manifest records the
#    layout (P and the layer bounds); a 2-stage set resumes on 1 stage and a 1-stage checkpoint on 2
#    stages, bit-for-bit the uninterrupted run's parameters;
#  - a stage killed by RINGMASTER_FAULT is replaced, the pipeline re-forms from the newest
#    (per-stage) checkpoint and the job Succeeds; a hung stage is caught by the progress deadline
#    and the job Succeeds.
source "$(dirname "$0")/5x-run-lib.bash"
# one kernel thread per worker: the bit-for-bit comparisons below are between jobs with different
# numbers of workers, which the kernels would otherwise give different thread counts (the CPUs over
# LOCAL_WORLD_SIZE), and a GEMM split over more threads sums in another order
export RINGMASTER_THREADS=1

# edit FILE REPLICAS P M SCHEDULE [EXTRA-TRAINING-LINE]: the pipeline fixture with these settings
mk() {
  sed -e "s/^  replicas: 2$/  replicas: $2/" \
      -e "s/pipelineStages: 2, microBatches: 4, schedule: 1f1b/pipelineStages: $3, microBatches: $4, schedule: $5/" \
      "$FIX/pipeline.yaml" > "$W/$1.yaml"
  if [ -n "${6:-}" ]; then sed -i "s/^    epochs: 2$/    epochs: 2\n    $6/" "$W/$1.yaml"; fi
  grep -q "pipelineStages: $3, microBatches: $4, schedule: $5" "$W/$1.yaml" || fail "fixture edit $1"
}
fnv() { grep -h 'msg="training done"' "$W"/run-"$1"/worker-*.log | grep -o 'params_fnv64=[0-9a-f]*' | sort -u; }

# ---- validation
"$RM_BIN/ringmaster" validate -f "$FIX/pipeline.yaml" > "$W/v.out" || fail "validate the fixture"
grep -q 'pipeline: 2 stages x 1 data-parallel replicas (rank r = d\*2 + p), 4 micro-batches, schedule 1f1b' "$W/v.out" ||
  fail "validate's pipeline line: $(cat "$W/v.out")"
mk bad3 3 2 1 1f1b
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad3.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] || fail "validate replicas 3 / 2 stages: exit $rc"
grep -q 'spec.minReplicas: must be a multiple of spec.parallelism.pipelineStages (2)\|spec.replicas: must be a multiple of spec.parallelism.pipelineStages (2)' "$W/v.err" ||
  fail "no field-named error: $(cat "$W/v.err")"
mk bad4 3 3 1 1f1b   # 3 stages for a 2-layer model
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad4.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] || fail "validate 3 stages: exit $rc"
grep -q "spec.parallelism.pipelineStages: must be <= the model's 2 linear layers" "$W/v.err" ||
  fail "no field-named error: $(cat "$W/v.err")"
mk bad5 2 2 0 1f1b
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad5.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q 'spec.parallelism.microBatches: must be >= 1 (got 0)' "$W/v.err" ||
  fail "microBatches 0: exit $rc $(cat "$W/v.err")"

# ---- the same math: 100 steps
mk eq1 1 1 1 1f1b "maxSteps: 100"
mk eq2 2 2 1 1f1b "maxSteps: 100"
mk eqg 2 2 4 gpipe "maxSteps: 100"
mk eqf 2 2 4 1f1b "maxSteps: 100"
for n in eq1 eq2 eqg eqf; do
  run_job $n -f "$W/$n.yaml" --epochs 1 -o json
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(fnv $n | wc -l)" = 1 ] || fail "$n: ranks disagree on the parameters: $(fnv $n)"
done
[ "$(fnv eq1)" = "$(fnv eq2)" ] || fail "2 stages x 1 micro-batch $(fnv eq2) != 1 stage $(fnv eq1)"
# per-stage memory: stage 0 holds layer 0 (784x128+128 floats), stage 1 layer 1 (128x10+10)
memb() { grep -h 'msg="memory"' "$W/run-$1/worker-$2.log" | tail -1 | grep -o "$3_bytes=[0-9]*" | cut -d= -f2; }
[ "$(memb eq2 0 params)" = $(( (784 * 128 + 128) * 4 )) ] || fail "stage 0 params_bytes $(memb eq2 0 params)"
[ "$(memb eq2 1 params)" = $(( (128 * 10 + 10) * 4 )) ] || fail "stage 1 params_bytes $(memb eq2 1 params)"
[ "$(memb eq2 1 optimizer)" = $(( (128 * 10 + 10) * 4 )) ] || fail "stage 1 optimizer_bytes $(memb eq2 1 optimizer)"
[ "$(memb eq1 0 params)" = $(( (784 * 128 + 128 + 128 * 10 + 10) * 4 )) ] || fail "1 stage params_bytes $(memb eq1 0 params)"
# per-stage checkpoints (interval 50): stage p wrote shard p of 2, the manifest has the layout
mf=$(ls "$W"/ck-eq2/manifest-000000000100-*-2.rmmf 2>/dev/null | head -1)
[ -n "$mf" ] || fail "no stage manifest at step 100: $(ls "$W/ck-eq2")"
grep -qx 'stages 2 0 1 2' "$mf" || fail "the manifest does not record the stage layout: $(cat "$mf")"
ls "$W"/ck-eq2/shard-000000000050-*-1-of-2.rmck >/dev/null || fail "no stage 1 file at step 50"
! ls "$W"/ck-eq2/ckpt-*.rmck >/dev/null 2>&1 || fail "a 2-stage job wrote a whole checkpoint"
# resume across layouts from step 50: 2 stages -> 1 stage, 1 stage -> 2 stages; both continue to
# step 100 with exactly the parameters of the uninterrupted runs
resume() {   # NAME FIXTURE FROM-CKPT-DIR
  mkdir -p "$W/ck-$1"
  cp "$3"/*-000000000050-* "$3"/ckpt-000000000050*.rmck "$W/ck-$1"/ 2>/dev/null || true
  [ -n "$(ls "$W/ck-$1")" ] || fail "$1: no step-50 checkpoint in $3: $(ls "$3")"
  run_job "$1" --resume -f "$2" --epochs 1 -o json
  [ $RC -eq 0 ] || fail "$1 exit $RC"
  grep -q 'msg="checkpoint loaded" .*step=50 ' "$W/run-$1/worker-0.log" || fail "$1 did not resume at step 50"
}
resume r21 "$W/eq1.yaml" "$W/ck-eq2"
grep -q 'msg="checkpoint loaded" path=[^ ]*manifest-000000000050-[^ ]* .*sharded=yes' "$W/run-r21/worker-0.log" ||
  fail "the 1-stage run did not load the 2-stage set"
[ "$(fnv r21)" = "$(fnv eq1)" ] || fail "2-stage checkpoint resumed on 1 stage: $(fnv r21) != $(fnv eq1)"
resume r12 "$W/eq2.yaml" "$W/ck-eq1"
[ "$(fnv r12)" = "$(fnv eq1)" ] || fail "1-stage checkpoint resumed on 2 stages: $(fnv r12) != $(fnv eq1)"
[ "$(fnv eqg)" = "$(fnv eqf)" ] || fail "gpipe $(fnv eqg) != 1f1b $(fnv eqf)"
grep -q 'msg="pipeline" stages=2 micro_batches=4 schedule=gpipe stage=1 replica=0 of 1 in_flight=4' "$W"/run-eqg/worker-1.log ||
  fail "gpipe stage 1 layout line"
grep -q 'msg="pipeline" stages=2 micro_batches=4 schedule=1f1b stage=0 replica=0 of 1 in_flight=2 layout="0:layers\[0,1)=100480 1:layers\[1,2)=1290"' "$W"/run-eqf/worker-0.log ||
  fail "1f1b stage 0 layout line: $(grep 'msg="pipeline"' "$W"/run-eqf/worker-0.log)"

# ---- 4 stages (middle stages have both neighbours) on a 4-layer model: the same, 60 steps
deep() {   # NAME REPLICAS P M SCHEDULE
  mk "$1" "$2" "$3" "$4" "$5" "maxSteps: 60"
  sed -i 's/hidden: \[128\]/hidden: [128, 64, 32]/' "$W/$1.yaml"
  grep -q 'hidden: \[128, 64, 32\]' "$W/$1.yaml" || fail "fixture edit $1"
}
deep d1 1 1 1 1f1b; deep d4 4 4 1 1f1b; deep d4g 4 4 8 gpipe; deep d4f 4 4 8 1f1b
for n in d1 d4 d4g d4f; do
  run_job $n -f "$W/$n.yaml" --epochs 1 -o json
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(fnv $n | wc -l)" = 1 ] || fail "$n: ranks disagree on the parameters: $(fnv $n)"
done
[ "$(fnv d1)" = "$(fnv d4)" ] || fail "4 stages x 1 micro-batch $(fnv d4) != 1 stage $(fnv d1)"
[ "$(fnv d4g)" = "$(fnv d4f)" ] || fail "4 stages: gpipe $(fnv d4g) != 1f1b $(fnv d4f)"
grep -q 'msg="pipeline" stages=4 micro_batches=8 schedule=1f1b stage=1 replica=0 of 1 in_flight=3 ' "$W"/run-d4f/worker-1.log ||
  fail "4-stage 1f1b stage 1 line"

# ---- accuracy against 1-stage runs with the same global batch (2 epochs)
mk one 1 1 1 1f1b          # 1 worker x 64
mk two 2 2 4 1f1b          # 2 stages, 1 replica x 64
mk dp2 2 1 1 1f1b          # 2 data-parallel workers x 64 (P = 1)
mk grid 4 2 4 gpipe        # 2 stages x 2 replicas x 64
P=$(free_port)
for n in one two dp2 grid; do
  if [ $n = grid ]; then
    "$RM_BIN/ringmaster" run --checkpoint-dir "$W/ck-$n" --run-dir "$W/run-$n" -f "$W/$n.yaml" -o json \
      >"$W/$n.out" 2>"$W/$n.err" &
    RUNNER_PID=$!
    # a worker's /metrics has the pipeline series while it trains
    got=0
    metrics_until "$W/run-grid" "$W/pm.txt" '^ringmaster_worker_pipeline_bubble_ratio\{' \
      '^ringmaster_worker_pipeline_bytes_total\{.*direction="sent"' '^ringmaster_worker_pipeline_stage\{' && got=1
    set +e; wait "$RUNNER_PID"; RC=$?; set -e; RUNNER_PID=""
    [ $got = 1 ] || fail "no pipeline metrics on a worker's /metrics"
  else
    run_job $n -f "$W/$n.yaml" -o json
  fi
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(jget $n 'j["status"]["phase"]')" = Succeeded ] || fail "$n phase"
done
acc() { jget "$1" 'j["status"]["result"]["testAccuracy"]'; }
a1=$(acc one); a2=$(acc two); d2=$(acc dp2); g4=$(acc grid)
$PY -c "import sys; sys.exit(0 if abs($a2-$a1) <= 0.003 else 1)" || fail "2 stages $a2 vs 1 stage $a1 (> 0.3 points)"
$PY -c "import sys; sys.exit(0 if abs($g4-$d2) <= 0.003 else 1)" || fail "2x2 $g4 vs 2 data-parallel $d2 (> 0.3 points)"
$PY -c "import sys; sys.exit(0 if $a2 >= 0.80 and $g4 >= 0.80 else 1)" || fail "accuracy too low: $a2 $g4"
# the 2x2 grid: rank r = d*P + p
for r in 0 1 2 3; do
  grep -q "msg=\"pipeline\" stages=2 micro_batches=4 schedule=gpipe stage=$((r % 2)) replica=$((r / 2)) of 2" "$W"/run-grid/worker-*.log ||
    fail "rank $r placement line"
done

# ---- a stage dies: the pipeline re-forms from the newest checkpoint and the job Succeeds
mk flt 4 2 4 1f1b
RINGMASTER_FAULT="exit:rank=1:step=400" run_job flt -f "$W/flt.yaml" -o json
[ $RC -eq 0 ] || fail "faulted run exit $RC"
[ "$(jget flt 'j["status"]["phase"]')" = Succeeded ] || fail "faulted phase"
[ "$(jget flt 'j["status"]["restarts"]')" -ge 1 ] || fail "no restart"
grep -q 'msg="checkpoint loaded" path=[^ ]*manifest-[^ ]* step=[1-9].* sharded=yes' "$W"/run-flt/worker-*.log ||
  fail "the re-formed pipeline loaded no per-stage checkpoint"
af=$(acc flt)
$PY -c "import sys; sys.exit(0 if abs($af-$d2) <= 0.005 else 1)" || fail "faulted 2x2 $af vs $d2"
# ---- a stage hangs: its neighbour times out and re-joins, the progress deadline restarts the
# group, the pipeline re-forms from the newest checkpoint and the job Succeeds
mk hang 2 2 4 1f1b
RINGMASTER_FAULT="hang:rank=1:step=300" run_job hang -f "$W/hang.yaml" --epochs 1 -o json
[ $RC -eq 0 ] || fail "hung run exit $RC"
[ "$(jget hang 'j["status"]["phase"]')" = Succeeded ] || fail "hung phase"
[ "$(jget hang 'j["status"]["restarts"]')" -ge 1 ] || fail "no restart after the hang"
grep -q 'reason=ProgressDeadlineExceeded' "$W/hang.err" || fail "the hang was not caught by the progress deadline"
assert_no_workers
log "PASS 1-stage=$a1 2-stage=$a2 dp2=$d2 2x2=$g4 faulted=$af fnv=$(fnv eq1)"
