#!/usr/bin/env bash
# Debian's real Prometheus scrapes a local `ringmaster run` job (runner metrics + its workers found
# through the runner's http_sd endpoint) and an operator; ringmaster_worker_samples_total must grow
# as seen through Prometheus's HTTP API. promtool checks every endpoint and the recording rules.
set -euo pipefail
root="$RM_ROOT"; bin="$RM_BIN"; tmp="$TMPDIR"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.5;
            for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
freeport() { "$RM_ROOT/tests/e2e/free-port.py"; }   # below the ephemeral range: see there
waitfor() { for _ in $(seq 1 "$2"); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "timed out: $1"; return 1; }

promtool check rules "$root/deploy/prometheus/rules.yaml"

# operator against kubesim (no jobs needed: its own metrics)
"$bin/kubesim" --addr 127.0.0.1:0 --kubeconfig-out "$tmp/kubeconfig" --no-kubelet > "$tmp/kubesim.out" 2>&1 &
pids+=($!)
waitfor "test -s $tmp/kubeconfig" 40
op_metrics=$(freeport); op_probe=$(freeport); op_rdzv=$(freeport)
"$bin/ringmaster" operator --kubeconfig "$tmp/kubeconfig" --metrics-bind-address "127.0.0.1:$op_metrics" \
  --health-probe-bind-address "127.0.0.1:$op_probe" --rendezvous-bind-address "127.0.0.1:$op_rdzv" \
  > "$tmp/operator.log" 2>&1 &
pids+=($!)
waitfor "curl -fsS http://127.0.0.1:$op_metrics/metrics" 40

# Prometheus first (it takes seconds to start), then the job it scrapes
run_metrics=$(freeport)
prom_port=$(freeport)
cat > "$tmp/prometheus.yml" <<CFG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $root/deploy/prometheus/rules.yaml
scrape_configs:
  - job_name: ringmaster-run
    honor_labels: true
    static_configs: [{targets: ["127.0.0.1:$run_metrics"]}]
  - job_name: ringmaster-workers
    honor_labels: true
    http_sd_configs: [{url: "http://127.0.0.1:$run_metrics/sd", refresh_interval: 1s}]
  - job_name: ringmaster-operator
    static_configs: [{targets: ["127.0.0.1:$op_metrics"]}]
CFG
promtool check config "$tmp/prometheus.yml"
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" > "$tmp/prometheus.log" 2>&1 &
pids+=($!)
waitfor "curl -fsS http://127.0.0.1:$prom_port/-/ready" 60

"$bin/ringmaster" run -f "$root/tests/packaging/prom-job.yaml" --metrics-addr "127.0.0.1:$run_metrics" \
  --checkpoint-dir "$tmp/ckpt" > "$tmp/run.log" 2>&1 &
run_pid=$!; pids+=($run_pid)
waitfor "curl -fsS http://127.0.0.1:$run_metrics/metrics" 40

# every endpoint passes promtool, worker endpoints taken from the runner's service discovery
curl -fsS "http://127.0.0.1:$op_metrics/metrics" | promtool check metrics
curl -fsS "http://127.0.0.1:$run_metrics/metrics" | promtool check metrics
waitfor "curl -fsS http://127.0.0.1:$run_metrics/sd | grep -q targets" 40
targets=$(curl -fsS "http://127.0.0.1:$run_metrics/sd" | /usr/bin/python3 -c 'import json,sys; print(" ".join(t for g in json.load(sys.stdin) for t in g["targets"]))')
[ -n "$targets" ] || { echo "no worker targets in http_sd"; exit 1; }
for t in $targets; do
  waitfor "curl -fsS http://$t/metrics" 40
  curl -fsS "http://$t/metrics" | promtool check metrics
done

query() { curl -fsS --get "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" |
  /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(sum(float(x["value"][1]) for x in r) if r else "none")'; }
first=none
for _ in $(seq 1 60); do first=$(query 'sum(ringmaster_worker_samples_total)'); [ "$first" != none ] && break; sleep 1; done
[ "$first" != none ] || { echo "Prometheus never saw ringmaster_worker_samples_total"; cat "$tmp/run.log" | tail; exit 1; }
second=$first
for _ in $(seq 1 30); do
  sleep 1; second=$(query 'sum(ringmaster_worker_samples_total)')
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$second') > float('$first') else 1)" && break
done
echo "samples_total through Prometheus: $first -> $second"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$second') > float('$first') else 1)" || { echo "did not grow"; exit 1; }
up=$(query 'sum(up{job="ringmaster-operator"})'); [ "$up" = "1.0" ] || { echo "operator not scraped: $up"; exit 1; }
echo "prometheus scrape test passed"
