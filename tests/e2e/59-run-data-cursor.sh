#!/usr/bin/env bash
# README "Failure semantics" row F10.
# The data cursor is in the checkpoint (docs/models-and-data.md, "Data formats"): for llm.c token
# shards (a folder written by `ringmaster tokenize`) and for IDX (the built-in Fashion-MNIST), a
# 2-worker job whose worker dies after an epoch boundary recovers in place from its checkpoint, and a
# job that failed there continues with --resume; both end with exactly the parameters of an
# uninterrupted run (the final params_fnv64), so they saw the same samples in the same order. A
# restore that ignored the cursor (data_pos) ends elsewhere (checked by hand: 6ff1b680… vs 36f09f4e…).
source "$(dirname "$0")/5x-run-lib.bash"
export RINGMASTER_THREADS=1
fnv() { grep -ho 'params_fnv64=[0-9a-f]*' "$W"/run-$1/worker-0.log | tail -1; }

head -c 20000 "$RM_ROOT/datasets/tinyshakespeare/input.txt" > "$W/c.txt"
"$RM_BIN/ringmaster" tokenize --val-fraction 0.1 "$W/c.txt" "$W/shards" > /dev/null
cat > "$W/tokens.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: dc-tokens}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 3, backoffSeconds: 0, progressDeadlineSeconds: 30}
  checkpoint: {intervalSteps: 10}
  training:
    model: {type: gpt, layers: 2, heads: 2, embed: 32, context: 32, vocab: 256, dropout: 0.0}
    data: {uri: $W/shards, format: tokens}
    optimizer: {type: adamw, lr: 0.003, beta1: 0.9, beta2: 0.99, weightDecay: 0.1}
    batchSizePerWorker: 8
    epochs: 100
    maxSteps: 80
    warmupSteps: 5
    schedule: cosine
YAML
cat > "$W/idx.yaml" <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: dc-idx}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 3, backoffSeconds: 0, progressDeadlineSeconds: 30}
  checkpoint: {intervalSteps: 10}
  training:
    data: {uri: "builtin:fashion-mnist"}
    model: {type: mlp, hidden: [16]}
    epochs: 2
    maxSteps: 160
    batchSizePerWorker: 256
    optimizer: {type: sgd, lr: 0.02, momentum: 0.9}
    warmupEpochs: 0
    schedule: cosine
YAML

# FORMAT KILL-STEP RESTORE-STEP: the epoch boundary (35 steps for the shards, 117 for IDX) lies
# before the kill, so the cursor restored is mid-epoch of a shifted/shuffled epoch
for c in "tokens 57 50" "idx 143 140"; do
  read -r f k s <<<"$c"
  run_job $f-straight -f "$W/$f.yaml"
  [ $RC -eq 0 ] || fail "$f straight: exit $RC"
  want=$(fnv $f-straight); [ -n "$want" ] || fail "$f: no checksum"

  RINGMASTER_FAULT="exit:rank=1:step=$k" run_job $f-inplace -f "$W/$f.yaml" -o json
  [ $RC -eq 0 ] && [ "$(jget $f-inplace 'j["status"]["restarts"]')" = 1 ] || fail "$f in place: exit $RC"
  grep -hq "checkpoint loaded.*step=$s " "$W"/run-$f-inplace/worker-1.log || fail "$f in place: no restore from $s"
  [ "$(fnv $f-inplace)" = "$want" ] || fail "$f in-place recovery: $(fnv $f-inplace) != straight $want"

  sed 's/maxRestarts: 3/maxRestarts: 0/' "$W/$f.yaml" > "$W/$f-0.yaml"
  RINGMASTER_FAULT="exit:rank=0:step=$k" run_job $f-resume -f "$W/$f-0.yaml"
  [ $RC -ne 0 ] || fail "$f: the faulted run with maxRestarts 0 succeeded"
  run_job $f-resume -f "$W/$f-0.yaml" --resume
  [ $RC -eq 0 ] || fail "$f --resume: exit $RC"
  grep -hq "checkpoint loaded.*step=$s " "$W"/run-$f-resume/worker-0.log || fail "$f --resume: no restore from $s"
  [ "$(fnv $f-resume)" = "$want" ] || fail "$f --resume: $(fnv $f-resume) != straight $want"
  log "$f: straight, in-place recovery from step $s and --resume from step $s all end at $want"
done
assert_no_workers
