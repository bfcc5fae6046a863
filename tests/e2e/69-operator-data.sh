#!/usr/bin/env bash
# README "Failure semantics" row F11.
# Remote data on Kubernetes (docs/models-and-data.md, "Where data comes from"), the operator on
# kubesim: a job whose data.uri is http:// gets a fetch-data init container of the worker image on
# every worker pod; with the checkpoint path on a volume the data cache lives there, so the job's
# pods fetch the object once (the loopback server sees one GET), a deleted worker's replacement
# runs its init container and fetches nothing, and the job Succeeds; status.data shows the bytes
# the init container fetched (it reports to the operator's rendezvous). A job whose data is missing
# fails at once with reason DataError and the fetch's own message (the init container's exit code 3
# and last log line, terminationMessagePolicy FallbackToLogsOnError), spending no restart.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
FIX="$RM_ROOT/tests/e2e/fixtures"
mkdir -p "$T/www" "$T/ckpt/default/remote" "$T/ckpt/default/missing"
head -c 60000 "$RM_ROOT/datasets/tinyshakespeare/input.txt" > "$T/www/c.txt"
$PY "$FIX/range_server.py" --dir "$T/www" --port-file "$T/www.port" --log "$T/www-requests.log" \
  2>"$T/www.err" &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$T/www.port" ] && break; sleep 0.05; done
PORT=$(cat "$T/www.port") || fail "the data server did not start"
touch "$T/www-requests.log"
gets() { grep -c "\"path\": \"/$1\"" "$T/www-requests.log" || true; }

start_kubesim
install_crd
start_operator a
wait_for 20 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
ksdata=$(grep -o 'data_dir=[^ ]*' "$T/kubesim.log" | head -1 | cut -d= -f2)

job() { # NAME FILE MAXSTEPS
  cat <<YAML
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  backend: ring
  runPolicy: {cleanPodPolicy: None}
  restartPolicy: {maxRestarts: 3, backoffSeconds: 1, progressDeadlineSeconds: 60}
  checkpoint: {path: $T/ckpt, intervalSteps: 20}
  training:
    model: {type: gpt, layers: 1, heads: 2, embed: 32, context: 32, vocab: 256}
    data: {uri: "http://127.0.0.1:$PORT/$2", format: text, validation: {fraction: 0.1}}
    optimizer: {type: adamw, lr: 0.003}
    batchSizePerWorker: 8
    epochs: 100
    maxSteps: $3
  template:
    spec:
      volumes: [{name: ck, hostPath: {path: $T/ckpt}}]
      containers:
      - name: worker
        image: ringmaster/worker:latest
        volumeMounts: [{name: ck, mountPath: $T/ckpt}]
YAML
}
init_ok() { # POD: its fetch-data init container ended 0
  [ "$(k get pod "$1" -o 'jsonpath={.status.initContainerStatuses[0].state.terminated.exitCode}' 2>/dev/null)" = 0 ]
}

job remote c.txt 1500 | k apply -f - >/dev/null
wait_for 60 "both workers initialised" bash -c "$(declare -f init_ok k); init_ok remote-worker-0 && init_ok remote-worker-1"
ic=$(k get pod remote-worker-0 -o 'jsonpath={.spec.initContainers[0].name} {.spec.initContainers[0].args[0]}')
[ "$ic" = "fetch-data fetch" ] || fail "init container: $ic"
cache=$(k get pod remote-worker-0 -o 'jsonpath={.spec.containers[0].env[?(@.name=="RINGMASTER_DATA_CACHE")].value}')
[ "$cache" = "$T/ckpt/.data-cache" ] || fail "the data cache is not on the checkpoint volume: $cache"
[ "$(gets c.txt)" = 1 ] || fail "two pods on one shared volume fetched $(gets c.txt) times: $(cat "$T/www-requests.log")"
grep -hq 'msg="data fetched"' "$ksdata"/logs/default_remote-worker-*/fetch-data.log || fail "no init container fetched"
log "2 workers initialised, 1 GET"
# status.data: the init container reported the fetch to the operator's rendezvous (kv data-fetch)
wait_for 20 "status.data of the fetch" bash -c \
  "[ \"\$(kubectl get tj remote -o jsonpath='{.status.data.uri} {.status.data.bytes} {.status.data.totalBytes}')\" = 'http://127.0.0.1:$PORT/c.txt 60000 60000' ]"

wait_for 60 "remote Running with progress" bash -c "[ \"\$(kubectl get tj remote -o jsonpath='{.status.progress.step}')\" -ge 40 ]"
uid=$(k get pod remote-worker-1 -o 'jsonpath={.metadata.uid}')
ep0=$(tj_field remote '{.status.epoch}')
k delete pod remote-worker-1 --wait=false >/dev/null
wait_for 60 "a replacement for worker 1" bash -c \
  "[ -n \"\$(kubectl get pod remote-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null)\" ] && [ \"\$(kubectl get pod remote-worker-1 -o jsonpath='{.metadata.uid}')\" != $uid ]"
wait_for 60 "the replacement initialised" bash -c "$(declare -f init_ok k); init_ok remote-worker-1"
[ "$(gets c.txt)" = 1 ] || fail "the replacement fetched again: $(cat "$T/www-requests.log")"
rlog=$(ls -t "$ksdata"/logs/default_remote-worker-1_*/fetch-data.log | head -1)
grep -q 'msg="data ready"' "$rlog" && ! grep -q 'msg="data fetched"' "$rlog" || fail "replacement's init: $(cat "$rlog")"
wait_for 480 "remote Succeeded" tj_phase_is remote Succeeded
[ "$(tj_field remote '{.status.epoch}')" -gt "$ep0" ] || fail "the group did not re-form after the pod delete"
log "a replaced worker fetched nothing; Succeeded with $(gets c.txt) GET"

job missing nope.txt 50 | k apply -f - >/dev/null
wait_for 60 "missing Failed" tj_phase_is missing Failed
reason=$(tj_field missing '{.status.conditions[?(@.type=="Failed")].reason}')
msg=$(tj_field missing '{.status.conditions[?(@.type=="Failed")].message}')
[ "$reason" = DataError ] || fail "missing: reason $reason ($msg)"
grep -q "spec.training.data.uri: 404 from http://127.0.0.1:$PORT/nope.txt" <<<"$msg" || fail "missing: message $msg"
[ "$(tj_field missing '{.status.restarts}')" = 0 ] || fail "missing data spent a restart"
log "missing data: DataError \"$msg\""
