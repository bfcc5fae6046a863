#!/usr/bin/env bash
# bench/gpt/run.sh — the transformer (`model.type: gpt`, docs/models-and-data.md "The transformer")
# against its peers and its physical limit, on CPU. Writes bench/results/gpt.md (+ gpt-loss.png);
# method and caveats in bench/notes/gpt.md. One command from the repository root after `make`:
#     bench/gpt/run.sh                 (or `BENCH=gpt bench/run-all.sh`, or all of `make bench`)
# Parts (PARTS="peak speed quality scale llmc", the default is all of them, in that order):
#  peak     SGEMM GFLOP/s at every matrix product of one training step of the two models below
#           (bench/gpt/sgemm_peak.c), for OpenBLAS, BLIS and oneDNN (one build each; a library whose
#           headers are missing is skipped), 1 and 2 threads, and the register-blocked FMA peak.
#  speed    tokens/s, interleaved, best of REPS: ringmaster (`ringmaster run`, 1 worker), PyTorch 1.13
#           (bench/gpt/torch_gpt.py, 1 and 2 threads) and llm.c (LLMC_DIR, 1 and 2 OpenMP threads) on
#           the baby GPT of deploy/examples/shakespeare-gpt.yaml (4 layers, 4 heads, 128 wide,
#           context 64, batch 12) and on nanoGPT's shakespeare_char shapes (6/6/384, context 256,
#           batch 12).
#  quality  the example with 2 workers, maxSteps QSTEPS (2000), evalEverySteps 250, constant lr:
#           its validation-loss curve beside PyTorch's at batch 24 (= 2 x 12); gnuplot draws
#           bench/results/gpt-loss.png when installed.
#  scale    the baby GPT with 1, 2, 4 workers (TCP ring: RINGMASTER_SHM=0; shared memory: the
#           default on one host), ZeRO-3 (sharding: full), pipeline stages (P = 2) and a parameter
#           server, SCALE_STEPS steps each: step time, tokens/s, per-rank memory.
#  llmc     only with LLMC_DIR=<a checkout of karpathy/llm.c>: its train_gpt2.c (CPU, OpenMP), built
#           from a temporary copy with B and T set to ours, on our model written in its checkpoint
#           format (bench/gpt/llmc_files.py), LLMC_STEPS (19) steps, LLMC_STEPS_SMALL (5) on the
#           6x384 model. Runs inside `speed`.
# Parts (a)/(c)/(d) need `model.type: gpt` in the worker: until `ringmaster validate` accepts the
# spec they are skipped with validate's message (listed under "Skipped" in the results).
# Knobs: QUICK=1 (a smoke run: seconds per part; its numbers are not measurements), REPS (3),
#  SPEED_MODELS ("baby small"), SPEED_STEPS (baby 30), SPEED_STEPS_SMALL (4), QSTEPS (2000), SCALE_STEPS (200), GEMM_SECS (0.6 per
#  shape), TORCH_QTHREADS (2), SPEC (default deploy/examples/shakespeare-gpt.yaml, else the copy
#  below), RM_BIN (bin/), RAW (a directory to keep the raw JSON lines and logs in), OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/bench/gpt"
BIN=${RM_BIN:-$ROOT/bin}
PY=/usr/bin/python3   # the interpreter with Debian's python3-torch
OUT=${OUT:-$ROOT/bench/results/gpt.md}
QUICK=${QUICK:-0}
q() { [ "$QUICK" = 1 ] && echo "$1" || echo "$2"; }
REPS=${REPS:-$(q 1 3)}
SPEED_STEPS=${SPEED_STEPS:-$(q 6 30)}
SPEED_STEPS_SMALL=${SPEED_STEPS_SMALL:-$(q 1 4)}
QSTEPS=${QSTEPS:-$(q 20 2000)}
QEVAL=${QEVAL:-$(q 10 250)}
SCALE_STEPS=${SCALE_STEPS:-$(q 10 200)}
GEMM_SECS=${GEMM_SECS:-$(q 0.05 0.6)}
TORCH_QTHREADS=${TORCH_QTHREADS:-2}
LLMC_STEPS=${LLMC_STEPS:-$(q 3 19)}
LLMC_STEPS_SMALL=${LLMC_STEPS_SMALL:-$(q 1 5)}   # llm.c's small model: ~10 s a step on one core
PARTS=${PARTS:-peak speed quality scale llmc}
SPEED_MODELS=${SPEED_MODELS:-baby small}
DATA=${RM_TINYSHAKESPEARE:-$ROOT/../shared/data/tinyshakespeare.txt}
keep_raw=1
RAW=${RAW:-}
if [ -z "$RAW" ]; then RAW=$(mktemp -d /tmp/rm-bench-gpt.XXXXXX); keep_raw=0; fi
mkdir -p "$RAW" "$(dirname "$OUT")"
cleanup() { [ "$keep_raw" = 1 ] || rm -rf "$RAW"; }
trap cleanup EXIT
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
skip() { echo "skipped: $*" >&2; echo "$*" >> "$RAW/skips.txt"; }
: > "$RAW/skips.txt"

# The job the bench derives its runs from: the lead's example when it is there, else this copy of
# docs/models-and-data.md's manifest (byte vocabulary, the last 10% validates).
SPEC=${SPEC:-$ROOT/deploy/examples/shakespeare-gpt.yaml}
if [ ! -f "$SPEC" ]; then
  SPEC="$RAW/shakespeare-gpt.yaml"
  cat > "$SPEC" <<'YAML'
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: shakespeare-gpt}
spec:
  replicas: 2
  backend: ring
  training:
    model: {type: gpt, layers: 4, heads: 4, embed: 128, context: 64, vocab: 256, dropout: 0.0}
    data: {uri: "builtin:tinyshakespeare", format: text, validation: {fraction: 0.1}}
    optimizer: {type: adamw, lr: 0.001, beta1: 0.9, beta2: 0.99, weightDecay: 0.1}
    batchSizePerWorker: 12
    maxSteps: 2000
    evalEverySteps: 250
YAML
fi
[ -f "$DATA" ] || DATA=/usr/share/ringmaster/data/tinyshakespeare.txt
export RM_TINYSHAKESPEARE="$DATA"

{
  echo "{\"date\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\", \"nproc\": $(nproc),"
  echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\", \"load_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo " \"torch\": \"$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)\","
  echo " \"quick\": $([ "$QUICK" = 1 ] && echo true || echo false),"
  llmc=""
  [ -n "${LLMC_DIR:-}" ] && llmc="LLMC_DIR=<llm.c $(git -C "$LLMC_DIR" rev-parse --short HEAD 2>/dev/null || echo checkout)> "
  echo " \"command\": \"$( [ "$QUICK" = 1 ] && echo 'QUICK=1 ')${llmc}bench/gpt/run.sh (PARTS=$PARTS, REPS=$REPS)\"}"
} > "$RAW/meta.json.start"

# ---- derived specs, and whether the worker takes them
# mkspec NAME path=value...  -> $RAW/NAME.json
mkspec() { local n=$1; shift; $PY "$HERE/report.py" spec "$SPEC" "$RAW/$n.json" "$n" "$@"; }
# valid NAME -> 0 when `ringmaster validate` accepts $RAW/NAME.json; else records why
valid() {
  local msg
  if [ ! -x "$BIN/ringmaster" ]; then skip "$1: no $BIN/ringmaster (run make)"; return 1; fi
  if ! msg=$("$BIN/ringmaster" validate -f "$RAW/$1.json" 2>&1); then
    skip "$1: \`ringmaster validate\` refuses it: $(echo "$msg" | tail -1 | sed "s|$RAW/||")"
    return 1
  fi
}
# rmrun NAME D [ENV=V...] -> one JSON summary line on stdout (D: the data-parallel width)
rmrun() {
  local n=$1 d=$2; shift 2
  env "$@" timeout 3600 "$BIN/ringmaster" run -f "$RAW/$n.json" --checkpoint-dir "$RAW/ck-$n" \
      --run-dir "$RAW/run-$n" -o json > "$RAW/$n.out" 2> "$RAW/$n.err" \
    || echo "ringmaster run $n failed (rc $?): $(tail -2 "$RAW/$n.err" | tr '\n' ' ')" >&2
  $PY "$HERE/report.py" rm-run "$n" "$RAW/$n.out" "$RAW/run-$n" "$d"
}
# common overrides: no evaluation or checkpoint inside a timed run
QUIET_SETS=(spec.training.evalEverySteps=1000000 spec.checkpoint.intervalSteps=1000000)
# prepare NAME path=value... -> $RAW/NAME.json with QUIET_SETS, 0 when the worker takes it; when
# only the quiet settings are refused, the spec without them (and a note that the timed window then
# holds the job's own evaluations and checkpoints)
prepare() {
  local n=$1; shift
  mkspec "$n" "$@" "${QUIET_SETS[@]}"
  "$BIN/ringmaster" validate -f "$RAW/$n.json" > /dev/null 2>&1 && return 0
  mkspec "$n" "$@"
  valid "$n" || return 1
  skip "$n: \`ringmaster validate\` refuses ${QUIET_SETS[*]}: timed with the spec's own evaluations and checkpoints"
}
SMALL_SETS=(spec.training.model.layers=6 spec.training.model.heads=6 spec.training.model.embed=384
            spec.training.model.context=256)

# ---- peak: SGEMM and FMA
if has peak; then
  echo "== peak: SGEMM at the model's shapes, 1 and 2 threads ($GEMM_SECS s per shape)" >&2
  B="$RAW/sgemm"; mkdir -p "$B"
  CF="-O2 -mavx2 -mfma -w"
  cc $CF -DLIB_OPENBLAS -o "$B/openblas" "$HERE/sgemm_peak.c" -lopenblas -lpthread 2>>"$B/build.err" \
    || skip "peak: OpenBLAS build failed (libopenblas-dev): $(tail -1 "$B/build.err")"
  BLISD=/usr/lib/x86_64-linux-gnu/blis-openmp
  cc $CF -DLIB_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp -fopenmp -o "$B/blis" "$HERE/sgemm_peak.c" \
      -L$BLISD -Wl,-rpath,$BLISD -lblis -lpthread 2>>"$B/build.err" \
    || skip "peak: BLIS build failed (libblis-dev, \`make deps-bench\`): $(tail -1 "$B/build.err")"
  cc $CF -DLIB_DNNL -fopenmp -o "$B/onednn" "$HERE/sgemm_peak.c" -ldnnl -lpthread 2>>"$B/build.err" \
    || skip "peak: oneDNN build failed (libdnnl-dev, \`make deps-bench\`): $(tail -1 "$B/build.err")"
  : > "$RAW/peak.jsonl"
  for t in 1 2; do
    for lib in openblas blis onednn; do
      [ -x "$B/$lib" ] || continue
      [ "$lib" = openblas ] && "$B/$lib" fma "$t" "$(q 0.3 1.5)" | tee -a "$RAW/peak.jsonl" >&2
      OMP_NUM_THREADS=$t BLIS_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t timeout 900 "$B/$lib" gemm "$t" "$GEMM_SECS" \
        >> "$RAW/peak.jsonl" || skip "peak: $lib gemm $t threads failed (rc $?)"
    done
  done
fi

# ---- speed: ringmaster, PyTorch and llm.c, interleaved, best of REPS
llmc_build() {  # MODEL T STEPS: $RAW/llmc/MODEL/train_gpt2 from a temporary copy with B = 12, T, STEPS
  local m=$1 T=$2 LLMC_STEPS=$3 dir="$RAW/llmc/$1"
  mkdir -p "$dir"
  $PY "$HERE/llmc_files.py" "$dir" --model "$m" --data "$DATA" >&2 || return 1
  # main() trains 41 steps, samples text at steps 20 and 40 (63 full forwards each) and times each
  # training step alone; LLMC_STEPS (< 20: no sampling) timed steps are enough
  sed -e "s/int B = 4;/int B = 12;/" -e "s/int T = 64;/int T = $T;/" \
      -e "s/step <= 40;/step <= $LLMC_STEPS;/" "$LLMC_DIR/train_gpt2.c" > "$dir/train_gpt2.c"
  grep -q "int B = 12;" "$dir/train_gpt2.c" && grep -q "int T = $T;" "$dir/train_gpt2.c" \
      && grep -q "step <= $LLMC_STEPS;" "$dir/train_gpt2.c" \
    || { skip "llmc: train_gpt2.c no longer has 'int B = 4;', 'int T = 64;', 'step <= 40;' in main(): not run"; return 1; }
  cc -Ofast -march=native -fopenmp -DOMP -I"$LLMC_DIR" -o "$dir/train_gpt2" "$dir/train_gpt2.c" -lm \
      2> "$dir/build.err" || { skip "llmc: build failed: $(tail -1 "$dir/build.err")"; return 1; }
}
if has speed; then
  : > "$RAW/speed.jsonl"
  LLMC_OK=""
  if has llmc; then
    if [ -z "${LLMC_DIR:-}" ]; then
      skip "llm.c peer: LLMC_DIR is not set (a checkout of github.com/karpathy/llm.c)"
    elif [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then
      skip "llm.c peer: no train_gpt2.c in LLMC_DIR=$LLMC_DIR"
    else
      case " $SPEED_MODELS " in *" baby "*) llmc_build baby 64 "$LLMC_STEPS" && LLMC_OK="baby";; esac
      case " $SPEED_MODELS " in *" small "*) llmc_build small 256 "$LLMC_STEPS_SMALL" && LLMC_OK="$LLMC_OK small";; esac
    fi
  fi
  for model in $SPEED_MODELS; do
    if [ "$model" = baby ]; then steps=$SPEED_STEPS; sets=(); else steps=$SPEED_STEPS_SMALL; sets=("${SMALL_SETS[@]}"); fi
    n="speed-$model"
    rm_ok=0
    prepare "$n" spec.replicas=1 spec.minReplicas= spec.maxReplicas= spec.training.maxSteps=$((steps + 5)) \
      "${sets[@]}" && rm_ok=1
    read -r -a targs <<< "$($PY "$HERE/report.py" torch-args "$RAW/$n.json")"
    for rep in $(seq "$REPS"); do
      echo "== speed $model, repetition $rep/$REPS" >&2
      if [ "$rm_ok" = 1 ]; then
        rmrun "$n" 1 | $PY -c '
import json, sys
r = json.loads(sys.stdin.read())
print(json.dumps({"peer": "ringmaster", "model": sys.argv[1], "threads": 1, "rep": int(sys.argv[2]),
                  "tokens_per_s": r["tokens_per_s_worker"], "phase": r["phase"], "steps": r["steps"]}))' \
          "$model" "$rep" | tee -a "$RAW/speed.jsonl" >&2
        rm -rf "$RAW/ck-$n" "$RAW/run-$n"
      fi
      timeout 1800 $PY "$HERE/torch_gpt.py" speed --model "$model" "${targs[@]}" --data "$DATA" \
          --steps "$steps" --warmup "$(q 1 3)" --reps 1 --threads 1,2 2>>"$RAW/torch.err" \
        | tee -a "$RAW/speed.jsonl" >&2
      case " $LLMC_OK " in *" $model "*)
        T=$([ "$model" = baby ] && echo 64 || echo 256)
        for t in 1 2; do
          (cd "$RAW/llmc/$model" && OMP_NUM_THREADS=$t timeout 1800 ./train_gpt2 > "run-$t.log" 2>&1)
          $PY "$HERE/report.py" llmc "$model" "$RAW/llmc/$model/run-$t.log" "$t" 12 "$T" | tee -a "$RAW/speed.jsonl" >&2
        done;;
      esac
    done
  done
fi

# ---- quality: 2 workers x 12 against PyTorch at batch 24
if has quality; then
  n=quality
  mkspec "$n" spec.replicas=2 spec.minReplicas= spec.maxReplicas= spec.training.maxSteps="$QSTEPS" \
    spec.training.evalEverySteps="$QEVAL" spec.training.schedule=constant spec.training.warmupSteps= \
    spec.training.warmupEpochs= spec.checkpoint.intervalSteps=1000000
  : > "$RAW/quality_rm.jsonl"; : > "$RAW/quality_torch.jsonl"
  if valid "$n"; then
    echo "== quality: ringmaster, 2 workers, $QSTEPS steps" >&2
    rmrun "$n" 2 | tee "$RAW/quality_rm.jsonl" >&2
  fi
  read -r -a targs <<< "$($PY "$HERE/report.py" torch-args "$RAW/$n.json")"
  echo "== quality: PyTorch, batch 24, $TORCH_QTHREADS threads, $QSTEPS steps" >&2
  timeout 7200 $PY "$HERE/torch_gpt.py" quality --model baby "${targs[@]}" --data "$DATA" --batch 24 \
      --steps "$QSTEPS" --eval-every "$QEVAL" --threads "$TORCH_QTHREADS" --csv "$RAW/quality_torch.csv" \
      $([ "$QUICK" = 1 ] && echo --val-windows 100) 2>>"$RAW/torch.err" > "$RAW/quality_torch.jsonl"
  [ -s "$RAW/quality_torch.jsonl" ] || skip "quality: the PyTorch run failed: $(tail -1 "$RAW/torch.err")"
  [ -f "$RAW/quality_torch.csv" ] && cp "$RAW/quality_torch.csv" "$(dirname "$OUT")/gpt-loss-torch.csv"
  $PY "$HERE/report.py" plot "$RAW" "$(dirname "$OUT")/gpt-loss.png"
fi

# ---- scale: workers, backends, ZeRO-3, pipeline, parameter server
if has scale; then
  : > "$RAW/scale.jsonl"
  base=(spec.minReplicas= spec.maxReplicas= spec.training.maxSteps="$SCALE_STEPS")
  # name | replicas | data-parallel width | environment | overrides (path=value, ';' between them)
  while IFS='|' read -r n w d envs sets; do
    [ -n "$n" ] || continue
    [ -z "${SCALE_ONLY:-}" ] || case " $SCALE_ONLY " in *" $n "*) ;; *) continue;; esac
    sa=(); [ -z "$sets" ] || IFS=';' read -r -a sa <<< "$sets"
    read -r -a ea <<< "$envs"
    prepare "scale-$n" spec.replicas="$w" "${base[@]}" "${sa[@]}" || continue
    echo "== scale $n ($w workers, $SCALE_STEPS steps)" >&2
    rmrun "scale-$n" "$d" "${ea[@]}" | $PY -c '
import json, sys; r = json.loads(sys.stdin.read()); r["name"] = sys.argv[1]; print(json.dumps(r))' "$n" \
      | tee -a "$RAW/scale.jsonl" >&2
    rm -rf "$RAW/ck-scale-$n"
  done <<'CONFIGS'
dp1|1|1|RINGMASTER_SHM=0|
dp2-ring|2|2|RINGMASTER_SHM=0|
dp2-shm|2|2|RINGMASTER_SHM=1|
dp4-ring|4|4|RINGMASTER_SHM=0|
dp4-shm|4|4|RINGMASTER_SHM=1|
zero3-2|2|2|RINGMASTER_SHM=1|spec.training.sharding=full
zero3-4|4|4|RINGMASTER_SHM=1|spec.training.sharding=full
pipe-p2m4|2|1|RINGMASTER_SHM=1|spec.parallelism={pipelineStages: 2, microBatches: 4, schedule: 1f1b}
pipe-p2m4-d2|4|2|RINGMASTER_SHM=1|spec.parallelism={pipelineStages: 2, microBatches: 4, schedule: 1f1b}
ps1-2w|2|2|RINGMASTER_SHM=0|spec.strategy=parameterServer;spec.parameterServer={replicas: 1, mode: sync}
ps1-4w|4|4|RINGMASTER_SHM=0|spec.strategy=parameterServer;spec.parameterServer={replicas: 1, mode: sync}
CONFIGS
fi

# ---- report
$PY - "$RAW" <<'PYEOF'
import json, sys
raw = sys.argv[1]
m = json.loads(open(raw + "/meta.json.start").read())
m["load_end"] = open("/proc/loadavg").read().split()[:3]
m["load_end"] = " ".join(m["load_end"])
json.dump(m, open(raw + "/meta.json", "w"))
PYEOF
$PY "$HERE/report.py" markdown "$RAW" "$OUT"
cat "$OUT"
