#!/usr/bin/env bash
# netns.sh — kubesim's namespaced nodes (docs/strategies.md#topology): a private "fabric" network
# namespace with a bridge, one namespace per node and one for the control plane, each joined to the
# bridge by a veth pair, then runs a command inside the control-plane namespace and deletes every
# namespace it made when that command ends (normally, on failure, or on INT/TERM/HUP).
#
#   tests/kubesim/netns.sh run --nodes N [--node-link RATE[,DELAY]] -- COMMAND [ARGS...]
#
# Addresses (10.213.0.0/24, only ever inside the namespaces made here, so two runs never collide):
# control plane 10.213.0.1, node i 10.213.0.(10+i). Names in /run/netns are global even when this
# runs inside `unshare -n`, so each carries this script's PID: rmks-fab-PID, rmks-cp-PID,
# rmks-nI-PID. The caller's own namespace is never touched: every `ip`/`tc` call names one of ours
# (`ip -n NS`), and the veth pairs are created inside the fabric namespace.
#
# --node-link shapes each node's link in both directions (the node's eth0 egress and the bridge
# port's egress): RATE with tbf (e.g. 1gbit, 100mbit), DELAY (e.g. 200us, 1ms) with netem as tbf's
# child — one way per link, so node-to-node traffic crosses two shaped links (2 x DELAY one way,
# the rate of one). A kernel without sch_netem (as on this project's CI VM) gets the rate only
# and a warning saying the delay was not applied; the control plane's link is never shaped.
#
# COMMAND runs via `ip netns exec rmks-cp-PID` with this environment (read by kubesim --nodes N,
# tests/e2e/6x-operator-lib.bash and bench/topo/run.sh):
#   KUBESIM_NETNS_NODES   "NETNS=ADDR NETNS=ADDR ..." node i's namespace and address, in order
#   KUBESIM_NETNS_CP      the control-plane namespace; KUBESIM_CP_ADDR its address
#   KUBESIM_NETNS_FABRIC  the fabric namespace (its bridge ports are vhI for node I, vhcp)
#   KUBESIM_NODE_LINK     the shaping asked for ("" = none); KUBESIM_NODE_DELAY_APPLIED 1|0
# Exit status: COMMAND's; 2 for bad arguments; 3 when the namespaces cannot be made (not root, no
# veth/bridge support) — with nothing left behind.
set -uo pipefail
PREFIX=10.213.0
usage() { echo "usage: netns.sh run --nodes N [--node-link RATE[,DELAY]] -- COMMAND [ARGS...]" >&2; exit 2; }
die() { echo "netns.sh: $*" >&2; exit 2; }

[ "${1:-}" = run ] || usage
shift
nodes="" link=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) [ $# -ge 2 ] || usage; nodes=$2; shift 2 ;;
    --node-link) [ $# -ge 2 ] || usage; link=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ $# -gt 0 ] || usage
[[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 16 ] ||
  die "--nodes: wants a count from 1 to 16, not \"$nodes\""
rate="" delay=""
if [ -n "$link" ]; then
  rate=${link%%,*}
  [ "$rate" != "$link" ] && delay=${link#*,}
  [[ "$rate" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] ||
    die "--node-link: the rate \"$rate\" is not a tc rate like 1gbit, 100mbit, 500kbit"
  [ -z "$delay" ] || [[ "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] ||
    die "--node-link: the delay \"$delay\" is not a tc time like 200us, 1ms"
fi
command -v ip >/dev/null && command -v tc >/dev/null || { echo "netns.sh: needs ip and tc (iproute2)" >&2; exit 3; }

FAB=rmks-fab-$$ CP=rmks-cp-$$
MADE=()
cleanup() {
  local ns
  # the node and control-plane namespaces first: deleting them destroys their veth ends
  for ns in "${MADE[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  MADE=()
}
child=""
on_signal() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  [ -n "$child" ] && wait "$child" 2>/dev/null
  cleanup
  exit 143
}
trap cleanup EXIT
trap on_signal INT TERM HUP

mkns() { ip netns add "$1" && MADE+=("$1") && ip -n "$1" link set lo up; }
# attach NS PORT ADDR: veth pair PORT (fabric side, on the bridge) <-> eth0 (in NS) with ADDR/24
attach() {
  ip -n "$FAB" link add "$2" type veth peer name eth0 netns "$1" &&
  ip -n "$FAB" link set "$2" master br0 up &&
  ip -n "$1" addr add "$3/24" dev eth0 &&
  ip -n "$1" link set eth0 up
}
# shape NS DEV: tbf at $rate, netem $delay under it when the kernel has netem
DELAY_APPLIED=0
shape() {
  tc -n "$1" qdisc add dev "$2" root handle 1: tbf rate "$rate" burst 256kb latency 50ms || return 1
  if [ -n "$delay" ]; then
    if tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: netem delay "$delay" limit 100000 2>/dev/null; then
      DELAY_APPLIED=1
    else
      DELAY_APPLIED=0
      return 2
    fi
  fi
}

setup() {
  mkns "$FAB" || return 1
  ip -n "$FAB" link add br0 type bridge && ip -n "$FAB" link set br0 up || return 1
  mkns "$CP" && attach "$CP" vhcp "$PREFIX.1" || return 1
  local i ns warned=0 rc
  NODES_ENV=""
  for i in $(seq 0 $((nodes - 1))); do
    ns=rmks-n$i-$$
    mkns "$ns" && attach "$ns" "vh$i" "$PREFIX.$((10 + i))" || return 1
    NODES_ENV+="${NODES_ENV:+ }$ns=$PREFIX.$((10 + i))"
    if [ -n "$rate" ]; then
      for side in "$ns eth0" "$FAB vh$i"; do
        shape $side; rc=$?
        [ $rc -eq 1 ] && return 1
        if [ $rc -eq 2 ] && [ $warned -eq 0 ]; then
          echo "netns.sh: WARNING: this kernel has no sch_netem: the link delay $delay is NOT applied (rate $rate only)" >&2
          warned=1
        fi
      done
    fi
  done
}
if ! setup; then
  echo "netns.sh: cannot make the namespaces (needs root, veth and bridge support); nothing is left behind" >&2
  cleanup
  exit 3
fi
# the control plane reaches every node over the bridge before anything runs
for i in $(seq 0 $((nodes - 1))); do
  ok=0
  for _ in $(seq 1 50); do
    # a refused connection to port 1 proves the path works (the RST came back over the bridge)
    out=$(ip netns exec "$CP" timeout 2 bash -c "exec 3<>/dev/tcp/$PREFIX.$((10 + i))/1" 2>&1)
    case "$out" in *refused*) ok=1; break ;; esac
    sleep 0.1
  done
  [ $ok -eq 1 ] || { echo "netns.sh: node $i ($PREFIX.$((10 + i))) does not answer on the fabric" >&2; cleanup; exit 3; }
done
export KUBESIM_NETNS_NODES="$NODES_ENV" KUBESIM_NETNS_CP="$CP" KUBESIM_CP_ADDR="$PREFIX.1" \
       KUBESIM_NETNS_FABRIC="$FAB" KUBESIM_NODE_LINK="$link" KUBESIM_NODE_DELAY_APPLIED="$DELAY_APPLIED"
ip netns exec "$CP" "$@" &
child=$!
wait "$child"
rc=$?
child=""
cleanup
exit $rc
