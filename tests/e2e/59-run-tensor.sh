#!/usr/bin/env bash
# e2e-timeout: 420
# Tensor parallelism (docs/models-and-data.md, "Tensor parallelism") with `ringmaster run`, the MLP:
#  - a bad spec is a field-named validation error (exit 2): T x P not dividing replicas, a split
#    width not divisible by T;
#  - the math: after 60 steps (same seed, same global batch) T = 2 and T = 4 hold the parameters of
#    T = 1, and T = 2 x D = 2 those of D = 2, within 1e-5 in the norm ||ours - ref|| / ||ref|| of
#    the exported safetensors (the same tensor names and shapes as T = 1: export assembles the
#    pieces); a different global batch does not (the comparison discriminates);
#  - a tensor rank killed by RINGMASTER_FAULT is replaced and the group re-forms from the newest
#    checkpoint (T = 2's run above, still matching T = 1);
#  - with gradClip and adamw too (the global norm counts each piece once, biases are not decayed),
#    with lamb (per-tensor trust ratios from norms summed over the group) and with
#    gradientAccumulationSteps 2;
#  - the tensor group of one host talks through shared memory; each rank holds half the model; the
#    tensor traffic is one forward allreduce of the logits per step (the stats line);
#  - T x P x D: with pipeline stages each stage's layers split over its tensor group; 2 x 2 x 1
#    (1F1B and GPipe, 4 micro-batches) reaches T = 1's parameters, 2 x 2 x 2 D = 2's, also after
#    a stage's tensor rank is killed or hangs (the progress deadline); a rank holds its stage's
#    pieces only;
#  - checkpoints are each rank's pieces (a pieces set, no gather): T = 2's set resumes at T = 4 and
#    T = 1 and reaches T = 1's parameters at step 60, 2 x 2 x 1's at T = 1, a corrupt shard is
#    refused naming it, export --checkpoint reads one;
#  - ZeRO-1 (sharding: optimizer) within the data-parallel group: half the optimizer state per
#    rank, D = 2's parameters, every rank's shard in the pieces set, resumed at T = 1.
source "$(dirname "$0")/5x-run-lib.bash"
export RINGMASTER_THREADS=1

# mk NAME REPLICAS T
mk() {
  sed -e "s/^  replicas: 2$/  replicas: $2/" -e "s/tensorParallel: 2/tensorParallel: $3/" \
    "$FIX/tensor.yaml" > "$W/$1.yaml"
  grep -q "tensorParallel: $3}" "$W/$1.yaml" || fail "fixture edit $1"
}
# variant PREFIX WANT SED-SCRIPT NAME...: each NAME's manifest edited by SED-SCRIPT (WANT must then be
# in it) as job PREFIX+NAME, run to exit 0
variant() {
  local pre=$1 want=$2 script=$3 n
  shift 3
  for n in "$@"; do
    sed -e "$script" "$W/$n.yaml" > "$W/$pre$n.yaml"
    grep -q "$want" "$W/$pre$n.yaml" || fail "fixture edit $pre$n"
    run_job "$pre$n" -f "$W/$pre$n.yaml" -o json
    [ $RC -eq 0 ] || fail "$pre$n exit $RC"
  done
}
cmp_export() { # A B: exports agree
  $PY "$RM_ROOT/tests/e2e/compare-safetensors.py" "$W/ck-$1/export/model.safetensors" \
    "$W/ck-$2/export/model.safetensors" 1e-5 > "$W/cmp-$1-$2.txt" 2>&1
}

# ---- validation
"$RM_BIN/ringmaster" validate -f "$FIX/tensor.yaml" > "$W/v.out" || fail "validate the fixture"
grep -q 'tensor: 2-way tensor groups x 1 data-parallel replicas (rank r = d\*2 + t)' "$W/v.out" ||
  fail "validate's tensor line: $(cat "$W/v.out")"
mk bad 3 2
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q 'spec.replicas: must be a multiple of spec.parallelism.tensorParallel x pipelineStages (2 x 1 = 2)' "$W/v.err" ||
  fail "replicas 3 with T = 2: exit $rc $(cat "$W/v.err")"
sed -e 's/hidden: \[128\]/hidden: [127]/' "$FIX/tensor.yaml" > "$W/bad2.yaml"
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad2.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q 'spec.training.model.hidden\[0\]: must be a multiple of spec.parallelism.tensorParallel (2)' "$W/v.err" ||
  fail "hidden [127] with T = 2: exit $rc $(cat "$W/v.err")"

# ---- 60 steps each: T = 1, 2, 4 on one replica; D = 2 with T = 1 and T = 2
mk t1 1 1; mk t2 2 2; mk t4 4 4; mk d2 2 1; mk t2d2 4 2
# T = 2 loses tensor rank 1 at step 55: it is replaced, the group re-forms from the newest complete
# checkpoint, and the job still ends with T = 1's parameters. Checkpoints every 10 steps there: a
# pieces set needs every rank's shard, and the killed rank's writer may not have finished the
# step-50 one (written in the background) when the fault fires 5 steps later; then step 40's is
# the newest complete set, as it would be after a real crash.
sed -i 's/intervalSteps: 50/intervalSteps: 10/' "$W/t2.yaml"
grep -q 'intervalSteps: 10' "$W/t2.yaml" || fail "fixture edit t2 (interval)"
for n in t1 t2 t4 d2 t2d2; do
  f=""; [ $n = t2 ] && f="exit:rank=1:step=55"
  RINGMASTER_FAULT="$f" run_job "$n" -f "$W/$n.yaml" -o json
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(jget $n "j['status']['phase']")" = Succeeded ] || fail "$n not Succeeded"
done
[ "$(jget t2 "j['status']['restarts']")" -ge 1 ] || fail "T = 2: no restart after the killed tensor rank"
grep -q 'msg="checkpoint loaded" .*step=[1-5]0 ' "$W/run-t2/worker-1.log" || fail "T = 2 did not re-form from a checkpoint"
cmp_export t2 t1 || fail "T = 2 differs from T = 1: $(cat "$W/cmp-t2-t1.txt")"
cmp_export t4 t1 || fail "T = 4 differs from T = 1: $(cat "$W/cmp-t4-t1.txt")"
cmp_export t2d2 d2 || fail "T = 2 x D = 2 differs from D = 2: $(cat "$W/cmp-t2d2-d2.txt")"
! cmp_export t2 d2 || fail "the comparison does not tell a different global batch apart"
log "T=2 vs T=1: $(cat "$W/cmp-t2-t1.txt"); T=4: $(cat "$W/cmp-t4-t1.txt"); T=2xD=2: $(cat "$W/cmp-t2d2-d2.txt")"
grep -q 'msg="tensor round" rank=1 world=2 t=1 T=2 p=0 P=1 d=0 D=1 tensor_comm=shm .* pieces=50890 of 101770' "$W/run-t2/worker-1.log" ||
  fail "T = 2's rank 1: no shm tensor group with half the model: $(grep 'tensor round' "$W/run-t2/worker-1.log")"
grep -q 'msg="tensor round" rank=3 world=4 t=1 T=2 p=0 P=1 d=1 D=2 tensor_comm=shm data_comm=shm' "$W/run-t2d2/worker-3.log" ||
  fail "T = 2 x D = 2's rank 3 groups: $(grep 'tensor round' "$W/run-t2d2/worker-3.log")"
# clipping's global norm counts each piece once; adamw decays the weights' pieces, not the biases
variant c 'gradClip: 0.5' 's/^    maxSteps: 60$/    maxSteps: 60\n    gradClip: 0.5/
s/optimizer: .*/optimizer: {type: adamw, lr: 0.002, weightDecay: 0.1}/' t1 t2
cmp_export ct2 ct1 || fail "T = 2 with gradClip and adamw differs from T = 1: $(cat "$W/cmp-ct2-ct1.txt")"
! cmp_export ct1 t1 || fail "gradClip/adamw changed nothing"
# lamb: each tensor's trust ratio from its norms, the split tensors' parts summed over the group
LAMB='s/optimizer: .*/optimizer: {type: lamb, lr: 0.005, weightDecay: 0.01}/'
variant l 'type: lamb' "$LAMB" t1 t2
cmp_export lt2 lt1 || fail "T = 2 with lamb differs from T = 1: $(cat "$W/cmp-lt2-lt1.txt")"
! cmp_export lt1 t1 || fail "lamb changed nothing"
log "lamb T=2 vs T=1: $(cat "$W/cmp-lt2-lt1.txt")"
# gradient accumulation: 2 micro-batches a step, the pieces' gradients their mean
variant a 'gradientAccumulationSteps: 2' 's/^    maxSteps: 60$/    maxSteps: 60\n    gradientAccumulationSteps: 2/' t1 t2
cmp_export at2 at1 || fail "T = 2 with gradientAccumulationSteps 2 differs from T = 1: $(cat "$W/cmp-at2-at1.txt")"
! cmp_export at1 t1 || fail "gradientAccumulationSteps changed nothing"
# one pair (784 -> 128 -> 10): per step one forward allreduce of 64 rows x 10 logits (g), none
# backward (the first pair's f moves nothing); T = 4 moves the same, as Megatron's count says
for n in t2 t4; do
  grep -q 'msg="tensor stats" t=0 T=[24] steps=[0-9]* fwd_bytes_per_step=2560 bwd_bytes_per_step=0 ' "$W/run-$n/worker-0.log" ||
    fail "$n tensor traffic: $(grep 'tensor stats' "$W/run-$n/worker-0.log" | tail -1)"
done
# each rank holds its pieces: 784x64+64 + 64x10 floats of the split pair plus the 10 replicated biases
memb() { grep -h 'msg="memory"' "$W/run-$1/worker-$2.log" | tail -1 | grep -o "$3_bytes=[0-9]*" | cut -d= -f2; }
[ "$(memb t1 0 params)" = $(( (784 * 128 + 128 + 128 * 10 + 10) * 4 )) ] || fail "T = 1 params_bytes $(memb t1 0 params)"
for k in params grads optimizer; do
  [ "$(memb t2 1 $k)" = $(( (784 * 64 + 64 + 64 * 10 + 10) * 4 )) ] || fail "T = 2 rank 1 ${k}_bytes $(memb t2 1 $k)"
done
# checkpoints are each rank's pieces: a set of T shards whose manifest records every piece's runs
mf=$(ls "$W"/ck-t2/manifest-000000000050-*-2.rmmf 2>/dev/null | head -1)
[ -n "$mf" ] || fail "T = 2 wrote no pieces set at step 50: $(ls "$W/ck-t2")"
grep -q '^pieces [0-9]' "$mf" && grep -q '^shard 1 50890 ' "$mf" || fail "T = 2's manifest: $(cat "$mf")"
! ls "$W"/ck-t2/ckpt-*.rmck >/dev/null 2>&1 || fail "T = 2 gathered a whole checkpoint"

# ---- T = 2's step-50 checkpoint resumed at T = 4 and at T = 1
for r in "r4 t4" "r1 t1"; do
  set -- $r
  mkdir -p "$W/ck-$1"
  cp "$W"/ck-t2/*-000000000050* "$W/ck-$1"/
  set +e
  "$RM_BIN/ringmaster" run --resume --checkpoint-dir "$W/ck-$1" --run-dir "$W/run-$1" -f "$W/$2.yaml" -o json \
    >"$W/$1.out" 2>"$W/$1.err"
  RC=$?; set -e
  [ $RC -eq 0 ] || fail "$1 exit $RC"
  grep -q 'msg="checkpoint loaded" .*step=50 .*sharded=yes' "$W/run-$1/worker-0.log" || fail "$1 did not resume the set at step 50"
  cmp_export "$1" t1 || fail "T = 2's checkpoint resumed as $2 differs from T = 1: $(cat "$W/cmp-$1-t1.txt")"
done
# a corrupt pieces shard: the set is skipped naming the file, never loaded
mkdir -p "$W/ck-rc"
cp "$W"/ck-t2/*-000000000050* "$W/ck-rc"/
f=$(ls "$W"/ck-rc/shard-000000000050-*-1-of-2.rmck)
printf 'garbage' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
set +e
"$RM_BIN/ringmaster" run --resume --checkpoint-dir "$W/ck-rc" --run-dir "$W/run-rc" -f "$W/t1.yaml" -o json >"$W/rc.out" 2>"$W/rc.err"
RC=$?; set -e
[ $RC -eq 2 ] || fail "--resume from a set with a corrupt shard: exit $RC"
grep -q 'sharded checkpoint skipped (invalid)" step=50 .*shard 1 of 2 (shard-000000000050-[0-9]*-1-of-2.rmck) unusable: .*header checksum mismatch' "$W/rc.err" &&
  grep -q 'nothing this job can continue from' "$W/rc.err" || fail "the corrupt shard was not named: $(tail -3 "$W/rc.err")"
! grep -q 'msg="checkpoint loaded"' "$W/run-rc/worker-0.log" || fail "a set with a corrupt shard was loaded"

# ---- T x P x D: the MLP with two pairs (784-128-64-32-10), stage 0 holding pair (0, 1), stage 1
# pair (2, 3), each split over its tensor group; activations cross between the stages' same
# tensor ranks (rank r = (d*P + p)*T + t)
mkp() { # NAME REPLICAS T P M SCHEDULE
  sed -e "s/^  replicas: 2$/  replicas: $2/" -e 's/hidden: \[128\]/hidden: [128, 64, 32]/' \
    -e "s/parallelism: {tensorParallel: 2}/parallelism: {tensorParallel: $3, pipelineStages: $4, microBatches: $5, schedule: $6}/" \
    "$FIX/tensor.yaml" > "$W/$1.yaml"
  grep -q "pipelineStages: $4, microBatches: $5" "$W/$1.yaml" && grep -q 'hidden: \[128, 64, 32\]' "$W/$1.yaml" ||
    fail "fixture edit $1"
}
mkp p1 1 1 1 1 1f1b; mkp p221 4 2 2 4 1f1b; mkp p221g 4 2 2 4 gpipe; mkp pd2 2 1 1 1 1f1b; mkp p222 8 2 2 2 gpipe
"$RM_BIN/ringmaster" validate -f "$W/p222.yaml" > "$W/v.out" || fail "validate the 2 x 2 x 2 job"
grep -q 'grid: 2-way tensor groups x 2 stages x 2 data-parallel replicas (rank r = (d\*2 + p)\*2 + t), 2 micro-batches, schedule gpipe' "$W/v.out" ||
  fail "validate's grid line: $(cat "$W/v.out")"
mkp bad3 6 2 3 1 1f1b
set +e; "$RM_BIN/ringmaster" validate -f "$W/bad3.yaml" >"$W/v.out" 2>"$W/v.err"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "spec.parallelism.pipelineStages: must be <= the model's 2 layer pairs with spec.parallelism.tensorParallel 2" "$W/v.err" ||
  fail "3 stages of 2 pairs: exit $rc $(cat "$W/v.err")"
# 2 x 2 x 1 loses rank 3 (stage 1, tensor rank 1) at step 55: the grid re-forms from step 50
for n in p1 p221 p221g pd2 p222; do
  f=""; [ $n = p221 ] && f="exit:rank=3:step=55"
  RINGMASTER_FAULT="$f" run_job "$n" -f "$W/$n.yaml" -o json
  [ $RC -eq 0 ] || fail "$n exit $RC"
  [ "$(jget $n "j['status']['phase']")" = Succeeded ] || fail "$n not Succeeded"
done
[ "$(jget p221 "j['status']['restarts']")" -ge 1 ] || fail "2 x 2 x 1: no restart after the killed rank"
cmp_export p221 p1 || fail "2 x 2 x 1 (1F1B, M = 4) differs from T = 1: $(cat "$W/cmp-p221-p1.txt")"
cmp_export p221g p1 || fail "2 x 2 x 1 (GPipe, M = 4) differs from T = 1: $(cat "$W/cmp-p221g-p1.txt")"
cmp_export p222 pd2 || fail "2 x 2 x 2 differs from D = 2: $(cat "$W/cmp-p222-pd2.txt")"
! cmp_export p221 pd2 || fail "the comparison does not tell a different global batch apart"
grep -q 'msg="tensor pipeline" stages=2 micro_batches=4 schedule=1f1b stage=1 layers=\[2,4) ' "$W/run-p221/worker-3.log" ||
  fail "rank 3's stage line: $(grep 'tensor pipeline' "$W/run-p221/worker-3.log" | tail -1)"
grep -q 'msg="tensor round" rank=6 world=8 t=0 T=2 p=1 P=2 d=1 D=2 tensor_comm=shm data_comm=shm' "$W/run-p222/worker-6.log" ||
  fail "2 x 2 x 2 rank 6's groups: $(grep 'tensor round' "$W/run-p222/worker-6.log" | tail -1)"
# lamb through the grid: each stage's tensors' norms summed over its tensor group
variant l 'type: lamb' "$LAMB" p1 p221
cmp_export lp221 lp1 || fail "2 x 2 x 1 with lamb differs from T = 1: $(cat "$W/cmp-lp221-lp1.txt")"
log "lamb 2x2x1 vs T=1: $(cat "$W/cmp-lp221-lp1.txt")"
# a rank holds its stage's pieces: stage 0 784x64+64 + 64x64+64, stage 1 64x16+16 + 16x10+10
[ "$(memb p221 0 params)" = $(( (784 * 64 + 64 + 64 * 64 + 64) * 4 )) ] || fail "2 x 2 x 1 rank 0 params_bytes $(memb p221 0 params)"
[ "$(memb p221 3 optimizer)" = $(( (64 * 16 + 16 + 16 * 10 + 10) * 4 )) ] || fail "2 x 2 x 1 rank 3 optimizer_bytes $(memb p221 3 optimizer)"
# stage 1's first layer is column-parallel: its input gradient (64 rows x 64) is summed (f) for stage 0
grep -q 'msg="tensor stats" t=1 T=2 steps=[0-9]* fwd_bytes_per_step=2560 bwd_bytes_per_step=16384 ' "$W/run-p221g/worker-3.log" ||
  fail "2 x 2 x 1 stage 1 tensor traffic: $(grep 'tensor stats' "$W/run-p221g/worker-3.log" | tail -1)"
# a hung tensor rank (stage 1, t = 0, from step 30) stalls its groups: the progress deadline
# restarts the grid, which re-forms from step 0's state and still reaches T = 1's parameters
mkp p221h 4 2 2 4 1f1b
RINGMASTER_FAULT="hang:rank=2:step=30" run_job p221h -f "$W/p221h.yaml" -o json
[ $RC -eq 0 ] && [ "$(jget p221h "j['status']['phase']")" = Succeeded ] || fail "hung 2 x 2 x 1: exit $RC"
grep -q 'reason=ProgressDeadlineExceeded' "$W/p221h.err" || fail "the hung rank was not caught by the progress deadline"
cmp_export p221h p1 || fail "2 x 2 x 1 after a hung rank differs from T = 1: $(cat "$W/cmp-p221h-p1.txt")"
# 2 x 2 x 1's pieces set (4 shards of two stages' sizes) resumes at T = 1
mkdir -p "$W/ck-rp1"
cp "$W"/ck-p221/*-000000000050-* "$W/ck-rp1"/
grep -q '^shard 3 1210 ' "$W"/ck-rp1/manifest-000000000050-*-4.rmmf || fail "2 x 2 x 1's set: $(cat "$W"/ck-rp1/manifest-*)"
run_job rp1 --resume -f "$W/p1.yaml" -o json
[ $RC -eq 0 ] || fail "rp1 exit $RC"
grep -q 'msg="checkpoint loaded" .*step=50 .*sharded=yes' "$W/run-rp1/worker-0.log" || fail "rp1 did not resume the set at step 50"
cmp_export rp1 p1 || fail "2 x 2 x 1's checkpoint resumed at T = 1 differs from T = 1: $(cat "$W/cmp-rp1-p1.txt")"
# `ringmaster export --checkpoint` reads the newest pieces set through its JSON manifest: the
# run's own export, bit for bit
mkdir -p "$W/xp"
"$RM_BIN/ringmaster" export --checkpoint "$W/ck-p221" --out "$W/xp" >"$W/xp.out" 2>"$W/xp.err" ||
  fail "export --checkpoint of a pieces set: $(tail -2 "$W/xp.err")"
grep -q '"kind": *"pieces"' "$W"/ck-p221/index-manifest-000000000060-*-4.json || fail "no pieces JSON manifest"
$PY "$RM_ROOT/tests/e2e/compare-safetensors.py" "$W/xp/model.safetensors" "$W/ck-p221/export/model.safetensors" 0 \
  >"$W/cmp-xp.txt" 2>&1 || fail "export --checkpoint differs from the run's export: $(cat "$W/cmp-xp.txt")"
log "T x P x D: 2x2x1 vs T=1: $(cat "$W/cmp-p221-p1.txt"); GPipe: $(cat "$W/cmp-p221g-p1.txt"); 2x2x2 vs D=2: $(cat "$W/cmp-p222-pd2.txt")"

# ---- ZeRO-1 in the data-parallel group (spec.training.sharding: optimizer): T = 2 x D = 2 keeps
# half of each rank's optimizer state and steps to D = 2's parameters, also through a killed rank;
# its checkpoints are every rank's shard of its pieces (4 shards, no gather), which resume at
# T = 1 x D = 2
sed -e 's/^    maxSteps: 60$/    maxSteps: 60\n    sharding: optimizer/' -e 's/intervalSteps: 50/intervalSteps: 10/' \
  "$W/t2d2.yaml" > "$W/z.yaml"
grep -q 'sharding: optimizer' "$W/z.yaml" && grep -q 'intervalSteps: 10' "$W/z.yaml" || fail "fixture edit z"
RINGMASTER_FAULT="exit:rank=2:step=55" run_job z -f "$W/z.yaml" -o json
[ $RC -eq 0 ] && [ "$(jget z "j['status']['phase']")" = Succeeded ] || fail "ZeRO-1 T = 2 x D = 2: exit $RC"
[ "$(jget z "j['status']['restarts']")" -ge 1 ] || fail "ZeRO-1 T = 2 x D = 2: no restart after the killed rank"
cmp_export z d2 || fail "ZeRO-1 T = 2 x D = 2 differs from D = 2: $(cat "$W/cmp-z-d2.txt")"
grep -q 'msg="tensor round" rank=3 world=4 t=1 T=2 p=0 P=1 d=1 D=2 .* pieces=50890 of 101770 optimizer=\[25445,+25445)' \
  "$W/run-z/worker-3.log" || fail "ZeRO-1 rank 3's shard: $(grep 'tensor round' "$W/run-z/worker-3.log" | tail -1)"
[ "$(memb z 3 optimizer)" = $(( $(memb t2d2 3 optimizer) / 2 )) ] ||
  fail "ZeRO-1 rank 3 optimizer_bytes $(memb z 3 optimizer), unsharded $(memb t2d2 3 optimizer)"
[ "$(memb z 3 params)" = "$(memb t2d2 3 params)" ] || fail "ZeRO-1 changed the pieces held"
zs=$(ls "$W"/ck-z/manifest-*-4.rmmf | sed 's/.*manifest-0*\([0-9]*\)-.*/\1/' | sort -n | grep -vx 60 | tail -1)
[ -n "$zs" ] || fail "ZeRO-1 wrote no pieces set before the end: $(ls "$W/ck-z")"
zm=$(printf '%s/ck-z/manifest-%012d-' "$W" "$zs")
grep -q '^shard 3 25445 ' "$zm"*-4.rmmf && grep -q '^shard 0 25445 ' "$zm"*-4.rmmf ||
  fail "ZeRO-1's set at step $zs: $(head -20 "$zm"*-4.rmmf)"
mkdir -p "$W/ck-rz"
cp "$W"/ck-z/*-$(printf '%012d' "$zs")-* "$W/ck-rz"/
run_job rz --resume -f "$W/d2.yaml" -o json
[ $RC -eq 0 ] || fail "rz exit $RC"
grep -q "msg=\"checkpoint loaded\" .*step=$zs .*sharded=yes" "$W/run-rz/worker-0.log" || fail "rz did not resume ZeRO-1's set at step $zs"
cmp_export rz d2 || fail "ZeRO-1's checkpoint resumed at T = 1 x D = 2 differs from D = 2: $(cat "$W/cmp-rz-d2.txt")"
log "ZeRO-1 T=2xD=2 vs D=2: $(cat "$W/cmp-z-d2.txt"); its step-$zs set resumed at D=2: $(cat "$W/cmp-rz-d2.txt")"
# ZeRO-1 through the grid: 2 x 2 x 2, each stage's pieces' optimizer over its two data-parallel ranks
sed -e 's/^    maxSteps: 60$/    maxSteps: 60\n    sharding: optimizer/' "$W/p222.yaml" > "$W/zp.yaml"
grep -q 'sharding: optimizer' "$W/zp.yaml" || fail "fixture edit zp"
run_job zp -f "$W/zp.yaml" -o json
[ $RC -eq 0 ] || fail "zp exit $RC: $(tail -3 "$W/zp.err")"
cmp_export zp pd2 || fail "ZeRO-1 2 x 2 x 2 differs from D = 2: $(cat "$W/cmp-zp-pd2.txt")"
[ "$(memb zp 7 optimizer)" = $(( $(memb p222 7 optimizer) / 2 )) ] ||
  fail "ZeRO-1 2 x 2 x 2 rank 7 optimizer_bytes $(memb zp 7 optimizer), unsharded $(memb p222 7 optimizer)"
ls "$W"/ck-zp/manifest-*-8.rmmf >/dev/null 2>&1 || fail "ZeRO-1 2 x 2 x 2 wrote no 8-shard set: $(ls "$W/ck-zp")"
log "ZeRO-1 2x2x2 vs D=2: $(cat "$W/cmp-zp-pd2.txt")"
assert_no_workers
log "PASS tensor parallelism: T = 2, 4, 2 x 2 and 2 x 2 x 1 / 2 x 2 x 2 match T = 1 / D = 2; resumes at T = 4 and T = 1"
