#!/usr/bin/env bash
# e2e-host: ip netns nodes
# e2e-timeout: 2400
# 60-operator-nodes: kubesim's nodes as network namespaces
# (docs/kube-api-double.md#beyond-the-api-what-kubesim-adds), with the operator and
# workers unchanged. Part 1 (this script, re-run by 6x-operator-lib.bash inside the control-plane
# namespace of 2 nodes with a 1gbit link): a 2-worker job lands one pod per node (node-0, node-1),
# each with podIP = hostIP = its node's address and spec.nodeName, its worker process inside that
# node's namespace; the API is not reachable from a node (only from the control plane); the ring's
# bytes cross the shaped bridge ports; the job Succeeds. Part 2: the existing operator e2e tests
# basic, restart and node-lost pass unchanged on 2 namespaced nodes (RM_KUBESIM_NODES=2).
# Around it all: every namespace made is gone afterwards and the caller's own namespace (links,
# addresses) is exactly as before.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${KUBESIM_NETNS_CP:-}" ] && [ -z "${RM_NODES_PART1:-}" ]; then
  : "${RM_BIN:?RM_BIN must name the binaries folder}"
  command -v kubectl >/dev/null 2>&1 || { echo "SKIP: kubectl is not installed"; exit 0; }
  # namespaces need root (CAP_SYS_ADMIN + CAP_NET_ADMIN) and veth/bridge in the kernel
  probe=rmks-probe-$$
  if ! ip netns add "$probe" 2>/dev/null; then echo "SKIP: cannot create network namespaces here (not root?)"; exit 0; fi
  ip netns del "$probe"
  before_links=$(ip -o link | sed 's/^[0-9]*: //' | awk '{print $1}' | sort)
  before_addrs=$(ip -o addr | awk '{print $2, $4}' | sort)
  names="${TMPDIR:-/tmp}/rm-nodes-names.$$"
  rc=0
  echo "== part 1: placement, addresses, namespaces, shaped link"
  RM_NODES_PART1=1 RM_KUBESIM_NODES=2 RM_KUBESIM_NODE_LINK=1gbit RM_NODES_NAMES="$names" bash "$0" || rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: part 1 (rc=$rc)"; exit 1; }
  for t in 60-operator-basic 61-operator-restart 67-operator-node-lost; do
    echo "== part 2: $t on 2 namespaced nodes"
    start=$(date +%s)
    RM_KUBESIM_NODES=2 RM_KUBESIM_NODE_LINK=1gbit bash "$here/$t.sh" || { echo "FAIL: $t on 2 nodes"; exit 1; }
    echo "== $t on 2 nodes: PASS ($(( $(date +%s) - start ))s)"
  done
  # the namespaces part 1 made (their names were written from inside) are gone; nothing of ours changed here
  [ -s "$names" ] || { echo "FAIL: part 1 did not record its namespaces"; exit 1; }
  for n in $(cat "$names"); do
    [ ! -e "/run/netns/$n" ] || { echo "FAIL: namespace $n left behind"; exit 1; }
  done
  rm -f "$names"
  [ "$(ip -o link | sed 's/^[0-9]*: //' | awk '{print $1}' | sort)" = "$before_links" ] || { echo "FAIL: the caller's links changed"; exit 1; }
  [ "$(ip -o addr | awk '{print $2, $4}' | sort)" = "$before_addrs" ] || { echo "FAIL: the caller's addresses changed"; exit 1; }
  echo "PASS"
  exit 0
fi

# ---- part 1, inside the control-plane namespace (6x-operator-lib.bash re-ran us there) ----
source "$here/6x-operator-lib.bash"
echo "$KUBESIM_NETNS_FABRIC $KUBESIM_NETNS_CP $(for e in $KUBESIM_NETNS_NODES; do echo "${e%%=*}"; done)" >"$RM_NODES_NAMES"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a --force-delete-after 3
wait_for 30 "operator ready" curl -fsS "http://127.0.0.1:$OP_PROBE_a/readyz"
# Node objects: node-0, node-1, Ready, InternalIP = the namespace's address
k get nodes -o json | $PY -c '
import json,os,sys
want=[e.split("=")[1] for e in os.environ["KUBESIM_NETNS_NODES"].split()]
items=sorted(json.load(sys.stdin)["items"], key=lambda n: n["metadata"]["name"])
assert [n["metadata"]["name"] for n in items]==["node-0","node-1"], [n["metadata"]["name"] for n in items]
for n,a in zip(items,want):
    ip=[x["address"] for x in n["status"]["addresses"] if x["type"]=="InternalIP"]
    assert ip==[a], (n["metadata"]["name"], ip, a)
    assert any(c["type"]=="Ready" and c["status"]=="True" for c in n["status"]["conditions"])
' || fail "Node objects"
# the API listens on the control plane's loopback: a node cannot reach it
ks_port=${KS_URL##*:}
n0=${KUBESIM_NETNS_NODES%%=*}
if ip netns exec "$n0" curl -fsS -m 3 "http://127.0.0.1:$ks_port/version" >/dev/null 2>&1; then
  fail "the API server is reachable from node-0's namespace"
fi
sent() { tc -s -n "$KUBESIM_NETNS_FABRIC" qdisc show dev "$1" | awk '/Sent/ {print $2; exit}'; }
s0=$(sent vh0); s1=$(sent vh1)
HIDDEN=256 fast_job spread 2 1 | k apply -f - >/dev/null
wait_for 90 "both workers Running" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=spread --field-selector=status.phase=Running --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
k get pods -l ringmaster.dev/job-name=spread -o wide
k get pods -l ringmaster.dev/job-name=spread -o json | $PY -c '
import json,os,sys
addr={"node-%d"%i: e.split("=")[1] for i,e in enumerate(os.environ["KUBESIM_NETNS_NODES"].split())}
pods=json.load(sys.stdin)["items"]
nodes=sorted(p["spec"]["nodeName"] for p in pods)
assert nodes==["node-0","node-1"], nodes     # one worker per node: the scheduler spreads
for p in pods:
    st=p["status"]; n=p["spec"]["nodeName"]
    assert st["podIP"]==addr[n] and st["hostIP"]==addr[n], (p["metadata"]["name"], n, st["podIP"], st["hostIP"])
    assert st["podIPs"]==[{"ip":addr[n]}], st["podIPs"]
' || fail "placement and addresses"
# each worker process is inside its node's network namespace
for i in 0 1; do
  node=$(k get pod "spread-worker-$i" -o jsonpath='{.spec.nodeName}')
  idx=${node#node-}
  ns=$(echo "$KUBESIM_NETNS_NODES" | tr ' ' '\n' | sed -n "$((idx + 1))p" | cut -d= -f1)
  pid=$(grep 'started container' "$T/kubesim.log" | grep "pod=default/spread-worker-$i " | tail -1 | grep -o 'pid=[0-9]*' | cut -d= -f2)
  [ -n "$pid" ] || fail "no pid for spread-worker-$i"
  want=$(stat -L -c %i "/run/netns/$ns")
  got=$(readlink "/proc/$pid/ns/net" | tr -dc 0-9)
  [ "$want" = "$got" ] || fail "spread-worker-$i (pid $pid) is in net:[$got], not $ns's net:[$want]"
  log "spread-worker-$i on $node runs in $ns"
done
wait_for 240 "spread Succeeded" tj_phase_is spread Succeeded
acc=$(tj_field spread '{.status.result.testAccuracy}')
$PY -c "import sys; sys.exit(0 if 0.7 < float('$acc') <= 1 else 1)" || fail "accuracy $acc"
# the ring's traffic crossed both nodes' shaped bridge ports (tbf at 1gbit): at least 1 MiB each way
d0=$(( $(sent vh0) - s0 )); d1=$(( $(sent vh1) - s1 ))
log "accuracy=$acc; bytes sent into node-0: $d0, into node-1: $d1 (tbf $(tc -n "$KUBESIM_NETNS_FABRIC" qdisc show dev vh0 | grep -o 'rate [^ ]*'))"
[ "$d0" -gt 1048576 ] && [ "$d1" -gt 1048576 ] || fail "the workers' traffic did not cross the fabric ($d0, $d1 bytes)"

# One node lost alone, for real: node-not-ready?node=X marks only X NotReady and takes its bridge
# port down (its worker keeps running, cut off). The worker pod there is deleted (an eviction); it
# stays Terminating (X's kubelet is gone) until the operator force-deletes it; the replacement is
# scheduled on the node that is still Ready, and the job Succeeds without X ever coming back.
HIDDEN=256 fast_job lost 2 2 | k apply -f - >/dev/null
wait_for 90 "lost Running" tj_phase_is lost Running
wait_for 60 "lost's workers Running" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=lost --field-selector=status.phase=Running --no-headers 2>/dev/null | grep -c .) -eq 2 ]"
X=$(k get pod lost-worker-1 -o jsonpath='{.spec.nodeName}')
Y=$(k get pod lost-worker-0 -o jsonpath='{.spec.nodeName}')
[ -n "$X" ] && [ -n "$Y" ] && [ "$X" != "$Y" ] || fail "lost's workers are not on two nodes ($X, $Y)"
uid=$(k get pod lost-worker-1 -o jsonpath='{.metadata.uid}')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$KS_URL/kubesim/node-not-ready?node=no-such-node")
[ "$code" = 404 ] || fail "node-not-ready for an unknown node answered $code, not 404"
curl -fsS -X POST "$KS_URL/kubesim/node-not-ready?node=$X" >/dev/null
[ "$(k get node "$X" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False ] || fail "$X not NotReady"
[ "$(k get node "$Y" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] || fail "$Y lost too"
ip -n "$KUBESIM_NETNS_FABRIC" -o link show "vh${X#node-}" | grep -q 'state DOWN' || fail "$X's link is still up"
log "$X lost (link down); deleting lost-worker-1 there"
k delete pod lost-worker-1 --wait=false >/dev/null
sleep 1
[ -n "$(k get pod lost-worker-1 -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" ] || fail "lost-worker-1 not stuck Terminating on the lost node"
wait_for 30 "force delete" bash -c "[ \"\$(kubectl get pod lost-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null)\" != '$uid' ]"
wait_for 60 "a replacement lost-worker-1" bash -c "[ -n \"\$(kubectl get pod lost-worker-1 -o jsonpath='{.spec.nodeName}' 2>/dev/null)\" ]"
[ "$(k get pod lost-worker-1 -o jsonpath='{.spec.nodeName}')" = "$Y" ] || fail "the replacement was not scheduled on the Ready node $Y"
wait_for 300 "lost Succeeded with $X still lost" tj_phase_is lost Succeeded
[ "$(k get node "$X" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False ] || fail "$X came back by itself"
log "lost Succeeded on $Y alone: restarts=$(tj_field lost '{.status.restarts}') accuracy=$(tj_field lost '{.status.result.testAccuracy}')"
curl -fsS -X POST "$KS_URL/kubesim/node-ready?node=$X" >/dev/null
ip -n "$KUBESIM_NETNS_FABRIC" -o link show "vh${X#node-}" | grep -q 'state DOWN' && fail "$X's link still down after node-ready"
[ "$(k get node "$X" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] || fail "$X not Ready again"
log "PASS"
