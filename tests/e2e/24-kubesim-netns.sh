#!/usr/bin/env bash
# e2e-host: ip netns nodes
# 24-kubesim-netns: tests/kubesim/netns.sh and kubesim --nodes on their own. The namespaces exist
# while the command runs (fabric with a bridge, control plane, nodes, addresses, tbf on both ends of
# each node link) and are all gone after it exits normally, fails, or netns.sh is signalled; the
# caller's own links and addresses never change; bad arguments are refused with the field named;
# kubesim --nodes refuses to start without the namespaces, and kubectl reaches a kubesim in the
# control plane from outside through `ip netns exec`.
set -euo pipefail
: "${RM_BIN:?RM_BIN must name the binaries folder}"
root=$(cd "$(dirname "$0")/../.." && pwd)
NS="$root/tests/kubesim/netns.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
probe=rmks-probe-$$
ip netns add "$probe" 2>/dev/null || { echo "SKIP: cannot create network namespaces here (not root?)"; exit 0; }
ip netns del "$probe"
T=$(mktemp -d "${TMPDIR:-/tmp}/rm-netns.XXXXXX")
trap 'rm -rf "$T"' EXIT
links() { ip -o link | sed 's/^[0-9]*: //' | awk '{print $1}' | sort; ip -o addr | awk '{print $2, $4}' | sort; }
before=$(links)
gone() { for n in $(cat "$1"); do [ ! -e "/run/netns/$n" ] || fail "namespace $n left behind ($2)"; done; }

# 1. inside: everything there, recorded; the command's status comes back
set +e
"$NS" run --nodes 3 --node-link 100mbit -- bash -c '
  set -e
  echo "$KUBESIM_NETNS_FABRIC $KUBESIM_NETNS_CP $(for e in $KUBESIM_NETNS_NODES; do echo ${e%%=*}; done)" >'"$T/names1"'
  [ "$(ip -o -4 addr show eth0 | awk "{print \$4}")" = 10.213.0.1/24 ]            # we are the control plane
  [ "$(echo $KUBESIM_NETNS_NODES | wc -w)" = 3 ]
  i=0; for e in $KUBESIM_NETNS_NODES; do
    [ "$(ip -n ${e%%=*} -o -4 addr show eth0 | awk "{print \$4}")" = "${e#*=}/24" ]
    tc -n ${e%%=*} qdisc show dev eth0 | grep -q "tbf 1: root.*rate 100Mbit"
    tc -n $KUBESIM_NETNS_FABRIC qdisc show dev vh$i | grep -q "tbf 1: root.*rate 100Mbit"
    i=$((i+1))
  done
  ip -n $KUBESIM_NETNS_FABRIC -o link show br0 | grep -q "state UP"
  ! tc -n $KUBESIM_NETNS_FABRIC qdisc show dev vhcp | grep -q tbf                 # control plane unshaped
  exit 7'
rc=$?
set -e
[ $rc -eq 7 ] || fail "netns.sh did not return the command's status 7 (rc=$rc)"
gone "$T/names1" "normal exit"
echo "ok: 3 nodes made, checked and removed"

# 2. netns.sh signalled while the command runs: still removed
"$NS" run --nodes 2 -- bash -c 'echo "$KUBESIM_NETNS_FABRIC $KUBESIM_NETNS_CP $(for e in $KUBESIM_NETNS_NODES; do echo ${e%%=*}; done)" >'"$T/names2"'; sleep 60' &
pid=$!
for _ in $(seq 1 100); do [ -s "$T/names2" ] && break; sleep 0.1; done
[ -s "$T/names2" ] || fail "the command did not start"
for n in $(cat "$T/names2"); do [ -e "/run/netns/$n" ] || fail "$n missing while running"; done
kill -TERM "$pid"
wait "$pid" || true
gone "$T/names2" "SIGTERM"
echo "ok: removed after SIGTERM"

# 3. bad arguments: refused, nothing made
for bad in "--nodes 0" "--nodes 17" "--nodes x" "--nodes 2 --node-link fast" "--nodes 2 --node-link 1gbit,soon"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$NS" run $bad -- true 2>&1); rc=$?
  set -e
  [ $rc -eq 2 ] || fail "netns.sh run $bad: rc=$rc, want 2"
  case "$bad" in *node-link*) want=--node-link ;; *) want=--nodes ;; esac
  echo "$msg" | grep -q -- "$want" || fail "netns.sh run $bad: the message does not name $want: $msg"
done
echo "ok: bad arguments refused"

# 4. kubesim --nodes without netns.sh: a clear error; with a missing namespace: named
set +e
msg=$(env -u KUBESIM_NETNS_NODES "$RM_BIN/kubesim" --nodes 2 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "KUBESIM_NETNS_NODES is not set" || fail "kubesim --nodes without namespaces: rc=$rc $msg"
msg=$(KUBESIM_NETNS_NODES="rmks-gone-$$=10.0.0.1" "$RM_BIN/kubesim" --nodes 1 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "rmks-gone-$$ does not exist" || fail "kubesim --nodes, missing namespace: rc=$rc $msg"
msg=$(KUBESIM_NETNS_NODES="a=10.0.0.1" "$RM_BIN/kubesim" --nodes 1 --runtime podman 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep -q "runtime process only" || fail "kubesim --nodes --runtime podman: rc=$rc $msg"
set -e
echo "ok: kubesim --nodes refuses what it cannot do"

# 5. kubectl from outside through ip netns exec (when kubectl is here)
if command -v kubectl >/dev/null 2>&1; then
  "$NS" run --nodes 2 -- bash -c '
    "'"$RM_BIN"'/kubesim" --nodes 2 --kubeconfig-out "'"$T"'/kc" >"'"$T"'/ks.log" 2>&1 &
    ks=$!; trap "kill \$ks; wait \$ks; exit 0" TERM
    echo "$KUBESIM_NETNS_CP" >"'"$T"'/cp"; wait' &
  pid=$!
  for _ in $(seq 1 100); do [ -s "$T/kc" ] && [ -s "$T/cp" ] && break; sleep 0.1; done
  cp=$(cat "$T/cp")
  if KUBECONFIG="$T/kc" KUBECACHEDIR="$T/kcache" kubectl get nodes >/dev/null 2>&1; then
    kill -TERM "$pid"; fail "kubesim in the control plane is reachable from the caller's namespace"
  fi
  out=$(ip netns exec "$cp" env KUBECONFIG="$T/kc" KUBECACHEDIR="$T/kcache" kubectl get nodes \
        -o 'jsonpath={range .items[*]}{.metadata.name}={.status.addresses[0].address} {end}' 2>&1) || { kill -TERM "$pid"; fail "kubectl via ip netns exec: $out"; }
  echo "nodes: $out"
  [ "$out" = "node-0=10.213.0.10 node-1=10.213.0.11 " ] || { kill -TERM "$pid"; fail "the nodes and their addresses: $out"; }
  kill -TERM "$pid"; wait "$pid" || true
  echo "ok: kubectl through ip netns exec"
fi
[ "$(links)" = "$before" ] || fail "the caller's links or addresses changed"
echo PASS
