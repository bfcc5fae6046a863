#!/usr/bin/env bash
# `ringmaster sample` against the PyTorch reference (tests/py/gpt_ref.py): greedy generation of
# 150 tokens (past the 16-token context window, so the window slides) from a GPT-2 that gpt_ref
# wrote is byte for byte gpt_ref's own greedy generation, for a text prompt and for token ids;
# a small GPT trained by `ringmaster run` on Tiny Shakespeare is exported and sampled the same,
# from --model (the export) and from --checkpoint (the checkpoint folder's manifest); a seed
# repeats a temperature draw, top-k 1 is greedy; stdout holds the text and nothing else; a model
# that is not a language model, a token outside the vocabulary and missing flags are refused.
source "$(dirname "$0")/5x-run-lib.bash"
R="$RM_BIN/ringmaster"
REF="$RM_ROOT/tests/py/gpt_ref.py"

# 1. a random GPT-2 from gpt_ref (weights N(0, 0.4): logits far apart, no near-ties to break)
$PY "$REF" init --config '{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 256}' \
  --out "$W/g" --seed 5 --std 0.4 || fail "gpt_ref init"
$PY "$REF" generate --model "$W/g" --prompt "ROMEO:" --tokens 150 >"$W/ref.out" || fail "gpt_ref generate"
"$R" sample --model "$W/g" --prompt "ROMEO:" --tokens 150 --temperature 0 >"$W/ours.out" 2>"$W/ours.err" ||
  fail "sample: $(cat "$W/ours.err")"
[ "$(stat -c %s "$W/ours.out")" = 156 ] || fail "stdout holds $(stat -c %s "$W/ours.out") bytes, not the prompt's 6 + 150"
cmp "$W/ours.out" "$W/ref.out" || fail "greedy text differs from PyTorch's: $(od -An -tu1 "$W/ours.out" | head -3) vs $(od -An -tu1 "$W/ref.out" | head -3)"
grep -q 'sample: generating' "$W/ours.err" || fail "no log on stderr"
ids="82,79,77,69,79,58"
[ "$("$R" sample --model "$W/g/model.safetensors" --prompt-tokens $ids --tokens 120 --temperature 0 2>/dev/null)" = \
  "$($PY "$REF" generate --model "$W/g" --prompt-tokens $ids --tokens 120)" ] || fail "token ids differ from PyTorch's"
log "random GPT-2: 150 greedy bytes and 120 token ids as PyTorch's"

# 2. trained by ringmaster run, exported, sampled from the export and from the checkpoint folder
cat >"$W/gpt.yaml" <<EOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpts}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 0}
  checkpoint: {intervalSteps: 1000}
  training:
    model: {type: gpt, layers: 2, heads: 2, embed: 32, context: 24, vocab: 256}
    data: {uri: "builtin:tinyshakespeare", format: text, validation: {fraction: 0.1}}
    optimizer: {type: adam, lr: 0.003, beta1: 0.9, beta2: 0.99}
    batchSizePerWorker: 8
    epochs: 1
    maxSteps: 250
    schedule: constant
EOF
run_job gpt -f "$W/gpt.yaml" -o json
[ $RC -eq 0 ] || fail "gpt training exit $RC"
EX="$W/ck-gpt/export"
$PY - "$RM_ROOT/tests/py" "$EX" <<'PY' || fail "the gpt export's names and config"
import json, sys
sys.path.insert(0, sys.argv[1])
import gpt_ref, st_lite
cfg = json.load(open(sys.argv[2] + "/config.json"))
assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new", cfg
assert [cfg[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")] == [2, 2, 32, 24, 256], cfg
t, _ = st_lite.load(sys.argv[2] + "/model.safetensors")
assert {n: tuple(a.shape) for n, a in t.items()} == gpt_ref.param_shapes(cfg), sorted(t)
PY
$PY "$REF" generate --model "$EX" --prompt "ROMEO:" --tokens 120 >"$W/ref2.out"
"$R" sample --model "$EX" --prompt "ROMEO:" --tokens 120 --temperature 0 >"$W/ours2.out" 2>"$W/ours2.err" ||
  fail "sample the export: $(cat "$W/ours2.err")"
cmp "$W/ours2.out" "$W/ref2.out" || fail "trained model: greedy text differs from PyTorch's"
"$R" sample --checkpoint "$W/ck-gpt" --prompt "ROMEO:" --tokens 120 --temperature 0 >"$W/ck.out" 2>"$W/ck.err" ||
  fail "sample the checkpoint: $(cat "$W/ck.err")"
cmp "$W/ck.out" "$W/ours2.out" || fail "--checkpoint and --model disagree"
grep -q 'sample: checkpoint loaded' "$W/ck.err" || fail "--checkpoint did not read the checkpoint"
log "trained GPT: $(head -c 60 "$W/ours2.out" | tr '\n' '|')"

# 3. drawing: a seed repeats, top-k 1 is greedy
a=$("$R" sample --model "$EX" --prompt "ROMEO:" --tokens 80 --temperature 0.9 --top-k 40 --seed 7 2>/dev/null)
b=$("$R" sample --model "$EX" --prompt "ROMEO:" --tokens 80 --temperature 0.9 --top-k 40 --seed 7 2>/dev/null)
c=$("$R" sample --model "$EX" --prompt "ROMEO:" --tokens 80 --temperature 0.9 --top-k 40 --seed 8 2>/dev/null)
[ "$a" = "$b" ] || fail "the same seed drew different text"
[ "$a" != "$c" ] || fail "seeds 7 and 8 drew the same 80 tokens"
"$R" sample --model "$EX" --prompt "ROMEO:" --tokens 120 --temperature 2 --top-k 1 --seed 3 2>/dev/null | cmp - "$W/ours2.out" ||
  fail "top-k 1 is not greedy"

# 4. refusals (exit 2: usage; 1: a model that cannot be sampled), nothing on stdout
expect() { # WANT-RC PATTERN ARGS...
  local want=$1 pat=$2; shift 2
  set +e; "$R" sample "$@" >"$W/x.out" 2>"$W/x.err"; local rc=$?; set -e
  [ $rc -eq "$want" ] && grep -q -- "$pat" "$W/x.err" && [ ! -s "$W/x.out" ] ||
    fail "sample $*: rc=$rc (want $want), stdout $(stat -c %s "$W/x.out") bytes, stderr: $(tail -2 "$W/x.err")"
}
expect 2 "give one of --model and --checkpoint" --prompt x --tokens 3
expect 2 "give one of --prompt and --prompt-tokens" --model "$EX" --tokens 3
expect 2 "--prompt-tokens: token 2: must be an integer in \[0, 256)" --model "$EX" --prompt-tokens 1,300 --tokens 3
expect 2 "--temperature: must be a number" --model "$EX" --prompt x --temperature -1
job_mlp() {
  sed -e 's/name: gpts/name: mlp/' -e 's/model: {type: gpt.*/model: {type: mlp, hidden: [16]}/' \
      -e '/^    data: /d' -e 's/maxSteps: 250/maxSteps: 5/' -e 's/optimizer: .*/optimizer: {type: sgd, lr: 0.01}/' \
      "$W/gpt.yaml" >"$W/mlp.yaml"
}
job_mlp
run_job mlp -f "$W/mlp.yaml" -o json
[ $RC -eq 0 ] || fail "mlp exit $RC"
expect 1 "is not a language model" --model "$W/ck-mlp/export" --prompt x --tokens 3
expect 1 "no checkpoint manifest" --checkpoint "$W" --prompt x --tokens 3
assert_no_workers
log "PASS"
