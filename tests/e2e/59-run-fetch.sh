#!/usr/bin/env bash
# README "Failure semantics" row F11.
# ringmaster run with data over HTTP (common/fetch.h; docs/models-and-data.md, "Where data comes
# from"): the MLP trains on a generated IDX set that is not Fashion-MNIST (12x12 images, 4
# classes) served by a loopback Range server; the job's two workers fetch each file once, a second
# run fetches nothing, a run killed during the download continues it with a Range request (the
# progress line shows the fetch; status.data its bytes), an https server whose certificate comes
# from a CA made here is trusted only through data.caBundle, and bad input — 404, a wrong sha256,
# an untrusted certificate, a missing CA bundle, a refused connection, a test split that does not
# match — ends Failed/DataError in seconds with no restart spent.
source "$(dirname "$0")/5x-run-lib.bash"
SRV_PIDS=()
stop_servers() { local p; for p in "${SRV_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; SRV_PIDS=(); }
trap 'rc=$?; stop_servers; (exit $rc); cleanup' EXIT

# ---- the data: class k lights quadrant k; train images gzipped, the rest plain ---------------
mkdir -p "$W/www/set"
$PY - "$W/www/set" <<'PYEOF'
import gzip, struct, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
def make(n):
    y = rng.integers(0, 4, n).astype(np.uint8)
    x = rng.integers(0, 60, (n, 12, 12)).astype(np.uint8)
    for i, k in enumerate(y):
        r, c = divmod(int(k), 2)
        x[i, r * 6:(r + 1) * 6, c * 6:(c + 1) * 6] += 150
    return x, y
for name, n, gz in (("train", 24000, True), ("t10k", 800, False)):
    x, y = make(n)
    img = struct.pack(">IIII", 0x803, n, 12, 12) + x.tobytes()
    lab = struct.pack(">II", 0x801, n) + y.tobytes()
    open(f"{d}/{name}-labels-idx1-ubyte", "wb").write(lab)
    if gz:
        open(f"{d}/{name}-images-idx3-ubyte.gz", "wb").write(gzip.compress(img, 1))
    else:
        open(f"{d}/{name}-images-idx3-ubyte", "wb").write(img)
# a set whose test images are 10x10: the data, not the worker, is at fault
import os, shutil
o = os.path.join(os.path.dirname(d), "odd")
os.makedirs(o)
for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"):
    shutil.copy(os.path.join(d, f), o)
x = rng.integers(0, 255, (800, 10, 10)).astype(np.uint8)
open(f"{o}/t10k-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, 800, 10, 10) + x.tobytes())
PYEOF
SUM=$(cat "$W/www/set/train-images-idx3-ubyte.gz" "$W/www/set/train-labels-idx1-ubyte" \
          "$W/www/set/t10k-images-idx3-ubyte" "$W/www/set/t10k-labels-idx1-ubyte" | sha256sum | cut -c1-64)
TRAIN_GZ_BYTES=$(stat -c %s "$W/www/set/train-images-idx3-ubyte.gz")

# start_server NAME [--rate N]: a Range server over $W/www; sets PORT, logs to $W/NAME.log
start_server() {
  local name=$1; shift
  rm -f "$W/$name.port"
  $PY "$FIX/range_server.py" --dir "$W/www" --port-file "$W/$name.port" --log "$W/$name.log" "$@" \
    2>"$W/$name.srv.err" &
  SRV_PIDS+=($!)
  for _ in $(seq 1 100); do [ -s "$W/$name.port" ] && break; sleep 0.05; done
  PORT=$(cat "$W/$name.port") || fail "server $name did not start"
  touch "$W/$name.log"
}
# manifest NAME URI [SHA]: a 2-worker MLP job on URI
manifest() {
  cat >"$W/$1.yaml" <<YEOF
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  backend: ring
  restartPolicy: {maxRestarts: 5, backoffSeconds: 0.2, progressDeadlineSeconds: 30}
  training:
    mode: train
    data: {uri: "$2"${3:+, sha256: "$3"}${DATA_EXTRA:+, $DATA_EXTRA}}
    model: {type: mlp, hidden: [32]}
    epochs: 1
    batchSizePerWorker: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
YEOF
}
# served PATH LOG: body bytes the server sent for PATH with 200/206
served() { $PY -c 'import json,sys; print(sum(r["sent"] for r in map(json.loads, open(sys.argv[2])) if r["path"]==sys.argv[1] and r["status"] in (200,206)))' "$1" "$2"; }
gets() { $PY -c 'import json,sys; print(sum(1 for r in map(json.loads, open(sys.argv[2])) if r["path"]==sys.argv[1] and r["status"] in (200,206)))' "$1" "$2"; }

# ---- 1. trains on the fetched set; each file fetched once for both workers --------------------
export RINGMASTER_DATA_CACHE="$W/cache"
start_server a
manifest fetch "http://127.0.0.1:$PORT/set/" "$SUM"
run_job fetch -f "$W/fetch.yaml" -o json
[ "$RC" -eq 0 ] || fail "run on fetched data: exit $RC"
[ "$(jget fetch 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
acc=$(jget fetch 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $acc >= 0.95 else 1)" || fail "testAccuracy $acc < 0.95 on the 4-class set"
# the model sized itself from the data: 144 inputs, 4 classes
$PY -c 'import json,sys; w=json.load(open(sys.argv[1]))["widths"]; assert w==[144,32,4], w' "$W/ck-fetch/export/config.json" ||
  fail "export widths: $(cat "$W/ck-fetch/export/config.json")"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ "$(gets "/set/$f" "$W/a.log")" = 1 ] || fail "/set/$f fetched $(gets "/set/$f" "$W/a.log") times by 2 workers (want 1)"
done
grep -q 'msg="data fetched" uri=http' "$W"/run-fetch/worker-*.log || fail "no worker logged the fetch"
# status.data: what the fetching worker reported through the rendezvous, the set's bytes in all
SET_BYTES=$(cat "$W/www/set/"* | wc -c)
[ "$(jget fetch '"%s %d %d" % (j["status"]["data"]["uri"], j["status"]["data"]["bytes"], j["status"]["data"]["totalBytes"])')" = \
  "http://127.0.0.1:$PORT/set/ $SET_BYTES $SET_BYTES" ] || fail "status.data: $(jget fetch 'j["status"].get("data")') (want $SET_BYTES bytes)"
# ---- 2. a second run (a replacement) finds the verified cache: no request at all --------------
n0=$(wc -l <"$W/a.log")
run_job fetch2 -f "$W/fetch.yaml" -o json
[ "$RC" -eq 0 ] || fail "second run: exit $RC"
[ "$(wc -l <"$W/a.log")" = "$n0" ] || fail "second run made $(( $(wc -l <"$W/a.log") - n0 )) requests (want 0)"
log "fetched once, cached after: testAccuracy=$acc"

# ---- 2b. https with a CA of the test's own: trusted only through data.caBundle ------------------
mkdir -p "$W/tls"
( cd "$W/tls" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=ringmaster e2e CA" &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key -out srv.csr \
    -subj "/CN=127.0.0.1" &&
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >ext &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext
) >"$W/tls/openssl.log" 2>&1 || fail "openssl: $(cat "$W/tls/openssl.log")"
$PY - "$W/www" "$W/tls" <<'PYEOF' 2>"$W/tls/server.err" &
import http.server, os, ssl, sys
www, tls = sys.argv[1:]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k): super().__init__(*a, directory=www, **k)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(tls, "srv.pem"), os.path.join(tls, "srv.key"))
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
open(os.path.join(tls, "port.tmp"), "w").write(str(srv.server_address[1]))
os.rename(os.path.join(tls, "port.tmp"), os.path.join(tls, "port"))
srv.serve_forever()
PYEOF
SRV_PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$W/tls/port" ] && break; sleep 0.05; done
TLS=$(cat "$W/tls/port") || fail "the TLS server did not start: $(cat "$W/tls/server.err")"
export RINGMASTER_DATA_CACHE="$W/cache-tls"
DATA_EXTRA="caBundle: \"$W/tls/ca.pem\"" manifest tls "https://127.0.0.1:$TLS/set/" "$SUM"
run_job tls -f "$W/tls.yaml" -o json
[ "$RC" -eq 0 ] || fail "https with caBundle: exit $RC"
[ "$(jget tls 'j["status"]["phase"]')" = Succeeded ] || fail "https with caBundle: phase"
log "https trusted through data.caBundle: Succeeded"
# what stays wrong fails before or at the fetch, naming the field (expect_data_error: section 4)
DATA_EXTRA="caBundle: ca.pem" manifest tlsrel "https://127.0.0.1:$TLS/set/"
"$RM_BIN/ringmaster" validate -f "$W/tlsrel.yaml" >"$W/tlsrel.out" 2>&1 && fail "a relative caBundle validated"
grep -q "spec.training.data.caBundle: must be an absolute path" "$W/tlsrel.out" || fail "tlsrel: $(cat "$W/tlsrel.out")"
manifest untrusted "https://127.0.0.1:$TLS/set/"
DATA_EXTRA="caBundle: \"$W/tls/nope.pem\"" manifest nobundle "https://127.0.0.1:$TLS/set/"

# ---- 3. killed during the download: the next run continues it with a Range request ------------
export RINGMASTER_DATA_CACHE="$W/cache-kill"
start_server slow --rate 150000
SLOW=$PORT
manifest kill "http://127.0.0.1:$SLOW/set/" "$SUM"
"$RM_BIN/ringmaster" run -f "$W/kill.yaml" --checkpoint-dir "$W/ck-kill" --run-dir "$W/run-kill" \
  >"$W/kill.out" 2>"$W/kill.err" &
RUNNER_PID=$!
part=""
for _ in $(seq 1 200); do
  part=$(ls "$W"/cache-kill/*/train-images-idx3-ubyte.gz.part 2>/dev/null | head -1 || true)
  [ -n "$part" ] && [ "$(stat -c %s "$part")" -gt 100000 ] && break
  sleep 0.05
done
[ -n "$part" ] && [ "$(stat -c %s "$part")" -gt 100000 ] || fail "the download never got going"
# the progress line shows the fetch (status.data) before the first step
for _ in $(seq 1 100); do grep -q "fetching http://127.0.0.1:$SLOW/set/ " "$W/kill.err" && break; sleep 0.1; done
grep -Eq "progress: .*fetching http://127\.0\.0\.1:$SLOW/set/  [0-9.]+/[0-9.]+ MB" "$W/kill.err" ||
  fail "no fetch progress line: $(grep progress: "$W/kill.err" | tail -3)"
kill -9 "$RUNNER_PID"; wait "$RUNNER_PID" 2>/dev/null || true; RUNNER_PID=""
for _ in $(seq 1 50); do [ -z "$(our_workers)" ] && break; sleep 0.1; done
assert_no_workers
have=$(stat -c %s "$part")
[ "$have" -lt "$TRAIN_GZ_BYTES" ] || fail "the download finished before the kill ($have bytes)"
start_server fast
sed -i "s|127.0.0.1:$SLOW/|127.0.0.1:$PORT/|" "$W/kill.yaml"
# the cache is keyed by URI: move the entry the killed run left to the new URI's key
$PY - "$W/cache-kill" "http://127.0.0.1:$SLOW/set/" "http://127.0.0.1:$PORT/set/" "$SUM" <<'PYEOF'
import hashlib, os, sys
c, old, new, s = sys.argv[1:]
k = lambda u: hashlib.sha256(u.encode()).hexdigest()[:16] + "-" + s
os.rename(os.path.join(c, k(old)), os.path.join(c, k(new)))
PYEOF
run_job kill2 -f "$W/kill.yaml" -o json
[ "$RC" -eq 0 ] || fail "resumed run: exit $RC"
$PY -c 'import json,sys; r=[x for x in map(json.loads, open(sys.argv[1])) if x["path"]=="/set/train-images-idx3-ubyte.gz" and x["status"] in (200,206)]; assert len(r)==1 and r[0]["status"]==206 and r[0]["start"]==int(sys.argv[2]), r' \
  "$W/fast.log" "$have" || fail "the resumed fetch did not ask for bytes from $have: $(cat "$W/fast.log")"
again=$(served /set/train-images-idx3-ubyte.gz "$W/fast.log")
[ "$again" -eq $(( TRAIN_GZ_BYTES - have )) ] || fail "resumed run fetched $again bytes of the train images (want $(( TRAIN_GZ_BYTES - have )))"
grep -q 'msg="fetch resuming" url=.*train-images-idx3-ubyte.gz from='"$have" "$W"/run-kill2/worker-*.log || fail "no 'fetch resuming' log line"
log "killed at $have of $TRAIN_GZ_BYTES bytes; the next run fetched the other $again"

# ---- 4. bad input: Failed/DataError in seconds, no restart, the field and cause named ---------
export RINGMASTER_DATA_CACHE="$W/cache-bad"
# expect_data_error NAME MAX_SECONDS MESSAGE_REGEX
expect_data_error() {
  local t0=$SECONDS
  run_job "$1" -f "$W/$1.yaml" -o json
  local took=$(( SECONDS - t0 ))
  [ "$RC" -eq 1 ] || fail "$1: exit $RC (want 1)"
  [ "$(jget "$1" 'j["status"]["phase"]')" = Failed ] || fail "$1: phase $(jget "$1" 'j["status"]["phase"]')"
  [ "$(jget "$1" '[c["reason"] for c in j["status"]["conditions"] if c["type"]=="Failed"][0]')" = DataError ] ||
    fail "$1: reason $(jget "$1" '[c for c in j["status"]["conditions"] if c["type"]=="Failed"]')"
  [ "$(jget "$1" 'j["status"].get("restarts", 0)')" = 0 ] || fail "$1: restarts spent"
  local msg; msg=$(jget "$1" 'j["status"]["message"]')
  echo "$msg" | grep -Eq "$3" || fail "$1: message \"$msg\" does not match /$3/"
  [ "$took" -le "$2" ] || fail "$1: took ${took}s (want <= $2)"
  log "$1: DataError in ${took}s: $msg"
}
manifest nf "http://127.0.0.1:$PORT/nope/"
expect_data_error nf 10 "^spec\.training\.data\.uri: 404 from http://127\.0\.0\.1:$PORT/nope/train-images-idx3-ubyte\$"
manifest badsum "http://127.0.0.1:$PORT/set/" "$(echo x | sha256sum | cut -c1-64)"
expect_data_error badsum 10 "^spec\.training\.data\.sha256: the data fetched from http://127\.0\.0\.1:$PORT/set/ has sha256 $SUM, not "
manifest odd "http://127.0.0.1:$PORT/odd/"
expect_data_error odd 10 "^spec\.training\.data: the test split has 100 inputs and [0-9]+ classes, the training split 144 and 4\$"
expect_data_error untrusted 10 "^spec\.training\.data\.uri: https://127\.0\.0\.1:$TLS/set/index\.txt: TLS: SSL certificate problem: (unable to get local issuer certificate|self.signed certificate in certificate chain)\$"
expect_data_error nobundle 10 "^spec\.training\.data\.caBundle: $W/tls/nope\.pem: No such file or directory\$"
DEAD=$(free_port)
manifest refused "http://127.0.0.1:$DEAD/set/"
# (the folder's index.txt is the first request: it names the folder's files when there is one)
expect_data_error refused 20 "^spec\.training\.data\.uri: http://127\.0\.0\.1:$DEAD/set/index\.txt: .*(still failing after 5 attempts)"
stop_servers
assert_no_workers
log "PASS"
