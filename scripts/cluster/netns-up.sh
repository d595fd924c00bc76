#!/usr/bin/env bash
# netns-up.sh - make N emulated "hosts" on this machine out of Linux network namespaces, joined by
# veth links to one bridge that lives in its own namespace: no interface of ours in the root
# namespace, no route to anywhere else, so no packet of a test ever leaves these namespaces.
#
# Usage (as root):  scripts/cluster/netns-up.sh [N] [-r RATE] [-s SLOTS]
#   N         number of hosts, 1..50                                        [2]
#   -r RATE   per-host egress limit, tc syntax (1gbit, 500mbit) or none     [none]  (netns-shape.sh)
#   -s SLOTS  MPI slots per host in the hostfile                            [1]
# Result (N=2, defaults):
#   namespace rtsw : bridge br0 + veth ports p0, p1 (no addresses)
#   namespace rt0  : lo + rtnet0 10.77.0.1/24  <-veth->  p0 in rtsw
#   namespace rt1  : lo + rtnet0 10.77.0.2/24  <-veth->  p1 in rtsw
#   /etc/netns/rtK/hosts maps rt0.. to their addresses (ip netns exec bind-mounts it on /etc/hosts);
#   /tmp/ringtrain-cluster/netns-rt/{hostfile,env} for mpirun-netns.sh and netns-shape.sh; IPv6 off.
# Idempotent: an existing set is torn down (netns-down.sh) and rebuilt. Knobs: see common.sh.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "netns-up: ERROR: $*" >&2; exit 1; }
. "$HERE/common.sh"

HOSTS=2; RATE=none; SLOTS=1
while [ $# -gt 0 ]; do
  case $1 in
    -r) RATE=${2:?-r needs a rate}; shift 2;;
    -s) SLOTS=${2:?-s needs a number}; shift 2;;
    -n) HOSTS=${2:?-n needs a number}; shift 2;;
    -h|--help) usage;;
    [0-9]*) HOSTS=$1; shift;;
    *) echo "netns-up: ERROR: unknown argument '$1'" >&2; usage;;
  esac
done
need_root
[[ "$HOSTS" =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 50 ] || die "N must be 1..50 (got '$HOSTS')"
[[ "$SLOTS" =~ ^[0-9]+$ ]] && [ "$SLOTS" -ge 1 ] || die "-s must be a positive number (got '$SLOTS')"
[[ "$RT_CLUSTER_NET" =~ ^10\.[0-9]+\.[0-9]+$ ]] || die "RT_CLUSTER_NET must look like 10.X.Y (a private /24 used only inside these namespaces)"
[[ "$RT_CLUSTER_PREFIX" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "RT_CLUSTER_PREFIX must be 1-8 lowercase letters/digits"
for c in ip tc unshare; do command -v "$c" >/dev/null || die "'$c' not found (apt-get install iproute2 util-linux)"; done

"$HERE/netns-down.sh" -q || die "netns-down.sh could not clear the old set"

t0=$(date +%s.%N)
# a half-built set is removed again, so a failure never leaves namespaces behind
trap 'rc=$?; [ $rc = 0 ] || { echo "netns-up: failed (rc=$rc); removing the partial set" >&2; "$HERE/netns-down.sh" -q || true; }' EXIT
P=$RT_CLUSTER_PREFIX NET=$RT_CLUSTER_NET
mkdir -p "$NS_DIR"
ip netns add "$NS_SW" || die "ip netns add $NS_SW failed (no CAP_SYS_ADMIN / netns support?)"
ip -n "$NS_SW" link set lo up
ip netns exec "$NS_SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip -n "$NS_SW" link add br0 type bridge
ip -n "$NS_SW" link set br0 up

hosts_file=$NS_DIR/hosts
{ echo "127.0.0.1 localhost"; for ((i=0; i<HOSTS; i++)); do echo "$NET.$((i+1)) $P$i"; done; } >"$hosts_file"
: >"$NS_DIR/hostfile.tmp"
for ((i=0; i<HOSTS; i++)); do
  ns=$P$i
  ip netns add "$ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$ns" link set lo up
  # both veth ends are created directly inside their namespaces; the root namespace never holds one
  ip link add "p$i" netns "$NS_SW" type veth peer name "$NS_IF" netns "$ns"
  ip -n "$NS_SW" link set "p$i" master br0 up
  ip -n "$ns" addr add "$NET.$((i+1))/24" dev "$NS_IF"
  ip -n "$ns" link set "$NS_IF" up
  mkdir -p "/etc/netns/$ns"
  cp "$hosts_file" "/etc/netns/$ns/hosts"
  echo "$ns slots=$SLOTS" >>"$NS_DIR/hostfile.tmp"
done
mv -f "$NS_DIR/hostfile.tmp" "$NS_DIR/hostfile"
cat >"$NS_DIR/env" <<EOT
RT_CLUSTER_PREFIX=$P
RT_CLUSTER_NET=$NET
RT_CLUSTER_HOSTS=$HOSTS
RT_CLUSTER_SUBNET=$NET.0/24
RT_CLUSTER_IF=$NS_IF
EOT

# verify: every host interface is up with its address, every bridge port forwards (bounded wait)
for ((i=0; i<HOSTS; i++)); do
  ip -n "$P$i" -br addr show "$NS_IF" | grep -q "UP.*$NET.$((i+1))/24" || die "$P$i/$NS_IF not up with $NET.$((i+1))"
done
end=$(( $(date +%s) + 10 ))
until [ "$(ip -n "$NS_SW" -d link show master br0 | grep -c 'state forwarding')" = "$HOSTS" ]; do
  [ "$(date +%s)" -lt "$end" ] || die "bridge ports not forwarding after 10 s: $(ip -n "$NS_SW" -br link show master br0 | tr '\n' ';')"
  sleep 0.1
done
if [ "$HOSTS" -ge 2 ] && command -v ping >/dev/null; then   # iputils-ping is optional
  ip netns exec "${P}0" ping -c 1 -W 2 "$NET.2" >/dev/null 2>&1 || die "${P}0 cannot ping $NET.2 (${P}1)"
fi

[ "$RATE" = none ] || "$HERE/netns-shape.sh" "$RATE" || die "netns-shape.sh $RATE failed"
echo "netns-up: $HOSTS host(s) ${P}0..$P$((HOSTS-1)) = $NET.1..$NET.$HOSTS/24 (switch ns $NS_SW, rate $RATE, $SLOTS slot(s) each) in $(elapsed "$t0") s; hostfile $NS_DIR/hostfile" >&2
