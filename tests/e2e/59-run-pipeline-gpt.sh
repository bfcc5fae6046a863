#!/usr/bin/env bash
# e2e-timeout: 900
# Pipeline stages train the tied transformer (docs/strategies.md#pipeline-stages, "A unit that a
# unit of another stage reads"): deploy/examples/shakespeare-gpt.yaml for 40 steps with `ringmaster run`:
#  - 2 stages x 2 micro-batches with batch 24 ends with the loss of the 2-replica allreduce run of
#    batch 12 (the same global batch 24: the mean of its ranks' losses), far below ln(256) = 5.545
#    (what a last stage projecting with a wte it never initialised stays at);
#  - the last stage logs its copy of the embedding, the copies agree with the owner's at the end,
#    and its memory counts the copy (its layers + the embedding unit);
#  - 4 stages of the 4-layer model (replicas 4) end bit for bit with the 2-stage run's parameters;
#  - the 2-stage run's per-stage checkpoint at step 20 resumes on 4 stages (the last stage's copy
#    comes from the owner) and ends bit for bit with the uninterrupted run.
source "$(dirname "$0")/5x-run-lib.bash"
# one kernel thread per worker: the bit-for-bit comparisons below are between jobs with different
# numbers of workers, which the kernels would otherwise give different thread counts (the CPUs over
# LOCAL_WORLD_SIZE), and a GEMM split over more threads sums in another order
export RINGMASTER_THREADS=1

# mk NAME REPLICAS BATCH [P]: the example, 40 steps, no periodic evaluation, a checkpoint every 20
mk() {
  sed -e "s/^  name: shakespeare-gpt$/  name: $1/" -e "s/^  replicas: 2$/  replicas: $2/" \
      -e "s/batchSizePerWorker: 12/batchSizePerWorker: $3/" -e 's/maxSteps: 4000/maxSteps: 40/' \
      -e 's/evalEverySteps: 500/evalEverySteps: 0/' -e 's/intervalSteps: 500/intervalSteps: 20/' \
      "$RM_ROOT/deploy/examples/shakespeare-gpt.yaml" > "$W/$1.yaml"
  if [ -n "${4:-}" ]; then
    sed -i "s/^  backend: ring$/  backend: ring\n  parallelism: {pipelineStages: $4, microBatches: 2}/" "$W/$1.yaml"
    grep -q "pipelineStages: $4" "$W/$1.yaml" || fail "fixture edit $1"
  fi
  grep -q 'maxSteps: 40' "$W/$1.yaml" && grep -q "batchSizePerWorker: $3" "$W/$1.yaml" || fail "fixture edit $1"
}
fnv() { grep -h 'msg="training done"' "$W"/run-"$1"/worker-*.log | grep -o 'params_fnv64=[0-9a-f]*' | sort -u; }
done_loss() { grep -h 'msg="training done"' "$W/run-$1/worker-$2.log" | grep -o 'train_loss=[0-9.]*' | cut -d= -f2; }
go() {
  run_job "$@"
  [ $RC -eq 0 ] || fail "$1 exit $RC"
  [ "$(jget "$1" 'j["status"]["phase"]')" = Succeeded ] || fail "$1 phase"
  [ "$(fnv "$1" | wc -l)" = 1 ] || fail "$1: ranks disagree on the parameters: $(fnv "$1")"
}

mk ar 2 12
mk p2 2 24 2
mk p4 4 24 4
log "allreduce, 2 replicas x 12"
go ar -f "$W/ar.yaml" -o json
log "2 stages x 2 micro-batches, batch 24"
go p2 -f "$W/p2.yaml" -o json
log "4 stages, batch 24"
go p4 -f "$W/p4.yaml" -o json

# the loss: the pipeline's global batch is the allreduce run's two ranks' rows
ar_mean=$($PY -c "print(($(done_loss ar 0) + $(done_loss ar 1)) / 2)")
p2_loss=$(jget p2 'j["status"]["result"]["trainLoss"]')
log "trainLoss: 2 stages $p2_loss, allreduce mean of ranks $ar_mean"
$PY -c "import sys; sys.exit(0 if abs($p2_loss - $ar_mean) < 0.01 and $p2_loss < 4.5 else 1)" ||
  fail "2-stage trainLoss $p2_loss is not the allreduce run's $ar_mean"

# the copy: logged, agreeing at the end, counted in the last stage's memory
grep -q 'msg="pipeline tied copy" stage=1 replica=0 unit=0 kind=embedding owner_stage=0 floats=40960' \
  "$W/run-p2/worker-1.log" || fail "no tied copy line on the last stage"
for r in 0 1; do
  grep -q 'msg="pipeline tied" unit=0 copies=1 agree=yes' "$W/run-p2/worker-$r.log" ||
    fail "rank $r: the copies of the embedding do not agree"
done
grep -q 'msg="pipeline tied" unit=0 copies=1 agree=yes' "$W/run-p4/worker-3.log" || fail "4 stages: copies disagree"
lay=$(grep -o 'layout="[^"]*"' "$W/run-p2/worker-1.log" | head -1)
last=$(echo "$lay" | grep -o '1:layers\[[0-9]*,[0-9]*)=[0-9]*' | cut -d= -f2)
memb() { grep -h 'msg="memory"' "$W/run-$1/worker-$2.log" | tail -1 | grep -o "$3_bytes=[0-9]*" | cut -d= -f2; }
[ "$(memb p2 1 params)" = $(( (last + 40960) * 4 )) ] ||
  fail "last stage params_bytes $(memb p2 1 params), want its layers ($last floats) + the embedding copy"

# 4 stages: the same arithmetic per unit, the same tied sum
[ "$(fnv p4)" = "$(fnv p2)" ] || fail "4 stages $(fnv p4) != 2 stages $(fnv p2)"

# resume the 2-stage set of step 20 on 4 stages
mkdir -p "$W/ck-r4"
cp "$W"/ck-p2/*-000000000020-* "$W/ck-r4"/ || fail "no step-20 set: $(ls "$W/ck-p2")"
log "resume the 2-stage step-20 set on 4 stages"
go r4 -f "$W/p4.yaml" --resume -o json
grep -q 'msg="checkpoint loaded" .*step=20 ' "$W/run-r4/worker-3.log" || fail "r4 did not resume at step 20"
[ "$(fnv r4)" = "$(fnv p2)" ] || fail "resumed on 4 stages $(fnv r4) != uninterrupted $(fnv p2)"
log "ok"
