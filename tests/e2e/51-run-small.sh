#!/usr/bin/env bash
# ringmaster run: a small job Succeeds; -o json's last stdout line is the TrainingJob with status;
# while it runs the controller serves /metrics and a Prometheus http_sd list of the workers, and
# writes file_sd.json; nothing is left running afterwards.
source "$(dirname "$0")/5x-run-lib.bash"
P=$(free_port)
"$RM_BIN/ringmaster" run -f "$FIX/small.yaml" --epochs 3 --metrics-addr "127.0.0.1:$P" \
   --checkpoint-dir "$W/ck-s" --run-dir "$W/run-s" -o json >"$W/s.out" 2>"$W/s.err" &
RUNNER_PID=$!
# the http_sd list names the controller and both workers
ok=0
for i in $(seq 1 150); do
  if curl -fsS --max-time 2 "http://127.0.0.1:$P/sd" -o "$W/sd.json" 2>/dev/null &&
     $PY -c 'import json,sys; g=json.load(open(sys.argv[1])); w=[x for x in g if x["labels"]["component"]=="worker"]; assert len(w)==2 and sorted(x["labels"]["rank"] for x in w)==["0","1"] and all(x["targets"][0].startswith("127.0.0.1:") for x in g)' "$W/sd.json" 2>/dev/null; then
    ok=1; break
  fi
  sleep 0.1
done
[ $ok = 1 ] || fail "/sd never listed 2 workers: $(cat "$W/sd.json" 2>/dev/null)"
curl -fsS --max-time 2 "http://127.0.0.1:$P/metrics" > "$W/m.txt" || fail "/metrics"
grep -q '^ringmaster_workers_desired{namespace="default",name="small"} 2' "$W/m.txt" || fail "workers_desired gauge: $(grep desired "$W/m.txt")"
grep -q '^ringmaster_jobs_created_total{namespace="default"} 1' "$W/m.txt" || fail "jobs_created_total"
# a worker target really serves Prometheus text
wt=$($PY -c 'import json,sys; print([x for x in json.load(open(sys.argv[1])) if x["labels"]["component"]=="worker"][0]["targets"][0])' "$W/sd.json")
# (to a file first: `curl | grep -q` under pipefail fails when grep exits early and curl gets EPIPE)
curl -fsS --retry 5 --retry-connrefused --retry-delay 1 --max-time 5 "http://$wt/metrics" > "$W/wm.txt" ||
  fail "worker target $wt: /metrics"
grep -q '^ringmaster_worker_step' "$W/wm.txt" || fail "worker target $wt has no ringmaster_worker_step"
[ -s "$W/run-s/file_sd.json" ] || fail "no file_sd.json"
set +e; wait "$RUNNER_PID"; rc=$?; set -e; RUNNER_PID=""
[ $rc -eq 0 ] || fail "exit $rc"
[ "$(jget s 'j["kind"]')" = TrainingJob ] || fail "last line is not a TrainingJob"
[ "$(jget s 'j["status"]["phase"]')" = Succeeded ] || fail "phase"
[ "$(jget s 'j["status"]["restarts"]')" = 0 ] || fail "restarts"
jget s '[c["type"] for c in j["status"]["conditions"] if c["status"]=="True"]' | grep -q Succeeded || fail "Succeeded condition"
acc=$(jget s 'j["status"]["result"]["testAccuracy"]')
$PY -c "import sys; sys.exit(0 if $acc >= 0.80 else 1)" || fail "testAccuracy $acc < 0.80"
jget s 'j["status"]["result"]["samplesPerSecond"] > 0 and j["status"]["result"]["seconds"] > 0' | grep -q True || fail "result numbers"
grep -q 'ringmaster_jobs_successful_total{namespace="default"} 1' "$W/run-s/metrics.prom" || fail "final metrics.prom"
ls "$W/ck-s"/ckpt-*.rmck >/dev/null 2>&1 || fail "no checkpoint written to --checkpoint-dir"
assert_no_workers
log "PASS testAccuracy=$acc"
