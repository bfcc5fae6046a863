#!/usr/bin/env bash
# bench/fetch/run.sh — fetching remote data (docs/models-and-data.md, "Where data comes from"):
# `ringmaster-worker fetch` (common/fetch: libcurl into the data cache, fsync + rename, with and
# without the sha256 check) against the curl command on the same object from the same loopback
# server, and the physical limit of putting those bytes on this disk (cp of a local copy). Two
# servers: tests/e2e/fixtures/range_server.py (HTTP, Python) and s3rver (S3, Node, SigV4). The
# server is the same for both clients, so the ratio is the client's; its absolute speed is the
# server's. SIZE_MB (default 256), RUNS (3: the best is reported). Writes bench/results/fetch.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RM_BIN:-$ROOT/bin}
PY=/usr/bin/python3
SIZE_MB=${SIZE_MB:-256}
RUNS=${RUNS:-3}
OUT=${FETCH_OUT:-$ROOT/bench/results/fetch.md}
T=$(mktemp -d "${TMPDIR:-/tmp}/rm-bench-fetch.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
S3RVER="$ROOT/tests/s3/node_modules/.bin/s3rver"
[ -x "$S3RVER" ] || { echo "no s3rver: run make deps"; exit 1; }

mkdir -p "$T/www"
head -c $((SIZE_MB * 1048576)) /dev/urandom > "$T/www/blob.bin"
SUM=$(sha256sum "$T/www/blob.bin" | cut -c1-64)
BYTES=$(stat -c %s "$T/www/blob.bin")
$PY "$ROOT/tests/e2e/fixtures/range_server.py" --dir "$T/www" --port-file "$T/http.port" --log /dev/null &
pids+=($!)
P3=$("$ROOT/tests/e2e/free-port.py")
mkdir -p "$T/s3"
node "$S3RVER" -d "$T/s3" -a 127.0.0.1 -p "$P3" --configure-bucket data -s >"$T/s3rver.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$T/http.port" ] && curl -s -o /dev/null "http://127.0.0.1:$P3/" && break; sleep 0.1; done
HTTP="http://127.0.0.1:$(cat "$T/http.port")/blob.bin"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$P3"
curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  -T "$T/www/blob.bin" "http://127.0.0.1:$P3/data/blob.bin"

best() { # best of RUNS: seconds of "$@" (each run after `pre`, which clears the outputs)
  local b="" s e t
  for _ in $(seq 1 "$RUNS"); do
    rm -rf "$T/cache" "$T/curl.out" "$T/cp.out"; sync
    s=$(date +%s.%N); "$@" >/dev/null 2>"$T/last.err" || { cat "$T/last.err"; exit 1; }; e=$(date +%s.%N)
    t=$($PY -c "print($e - $s)")
    b=$($PY -c "print(min(float('${b:-1e9}'), $t))")
  done
  echo "$b"
}
spec() { # URI [SHA]: the worker's settings for `fetch`
  printf '{"model":{"type":"gpt","layers":1,"heads":1,"embed":8,"context":8,"vocab":256},"data":{"uri":"%s","format":"text"%s}}' \
    "$1" "${2:+,\"sha256\":\"$2\"}"
}
rmfetch() { RINGMASTER_TRAINING="$(spec "$@")" RINGMASTER_DATA_CACHE="$T/cache" "$BIN/ringmaster-worker" fetch --metrics-addr off; }
curl_http() { curl -fsS -o "$T/curl.out" "$HTTP"; }
curl_http_sync() { curl_http && sync "$T/curl.out"; } # what the cache does: the bytes on disk
startup() { "$BIN/ringmaster-worker" --help; }        # the worker process itself (its libraries)
curl_s3() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -o "$T/curl.out" \
              -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
              "http://127.0.0.1:$P3/data/blob.bin"; }
copy() { cp "$T/www/blob.bin" "$T/cp.out" && sync "$T/cp.out"; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
c_http=$(best curl_http); r_http=$(best rmfetch "$HTTP"); r_http_sum=$(best rmfetch "$HTTP" "$SUM")
c_http_sync=$(best curl_http_sync); up_s=$(best startup)
c_s3=$(best curl_s3); r_s3=$(best rmfetch "s3://data/blob.bin"); r_s3_sum=$(best rmfetch "s3://data/blob.bin" "$SUM")
cp_s=$(best copy)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
$PY - "$OUT" "$BYTES" "$SIZE_MB" "$RUNS" "$load0" "$load1" "$(nproc)" "$c_http" "$r_http" "$r_http_sum" \
    "$c_s3" "$r_s3" "$r_s3_sum" "$cp_s" "$c_http_sync" "$up_s" <<'PY'
import sys, datetime
out, nbytes, mb, runs, l0, l1, ncpu = sys.argv[1:8]
c_http, r_http, r_http_sum, c_s3, r_s3, r_s3_sum, cp_s, c_http_sync, up_s = map(float, sys.argv[8:17])
n = int(nbytes)
mbps = lambda s: n / s / 1e6
rows = [("HTTP (range_server.py)", c_http, r_http, r_http_sum), ("S3 (s3rver, SigV4)", c_s3, r_s3, r_s3_sum)]
L = ["## Fetching remote data (`ringmaster-worker fetch` vs curl)", "",
     f"`bench/fetch/run.sh` ({datetime.date.today()}): one {mb} MiB object from a loopback server, best of {runs}; "
     f"ringmaster writes into the data cache (.part, fsync, rename), curl to a file; {ncpu} CPUs, load average "
     f"{l0} at the start, {l1} at the end. Ceiling: cp + sync of a local copy ({mbps(cp_s):.0f} MB/s).", "",
     "| server | curl MB/s | ringmaster MB/s | ratio | ringmaster + sha256 MB/s | ratio |", "|---|---|---|---|---|---|"]
for name, c, r, rs in rows:
    L.append(f"| {name} | {mbps(c):.0f} | {mbps(r):.0f} | {c / r:.2f} | {mbps(rs):.0f} | {c / rs:.2f} |")
L.append("")
L.append("Ratio = curl's time / ringmaster's (1.00 = as fast as curl). The servers bound both clients alike.")
L.append("")
L.append(f"Where the HTTP difference goes: curl followed by `sync` of its file (the bytes on disk, as the cache's "
         f"fsync before its rename guarantees) took {c_http_sync:.3f} s, against ringmaster's {r_http:.3f} s and curl's "
         f"{c_http:.3f} s without it; starting the worker process alone (`ringmaster-worker --help`: the "
         f"CUDA build links cuBLAS, whose cuBLASLt runs ~0.1 s of initialisers and dirties ~95 MB at load; the CPU image is built without CUDA) took {up_s:.3f} s. "
         f"ringmaster's time less its start-up is {r_http - up_s:.3f} s, {c_http_sync / (r_http - up_s):.2f}x "
         f"curl + sync.")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
