#!/usr/bin/env bash
# netns-shape.sh - set or clear the per-host egress rate limit on the hosts from netns-up.sh.
#
# Usage (as root):  scripts/cluster/netns-shape.sh RATE [--burst SIZE] [--delay TIME]
#   RATE          tc rate (1gbit, 500mbit, 100mbit) or "none" to remove all shaping
#   --burst SIZE  tbf bucket [64kb]: what a host may send at once above RATE. A real link has none, so keep it
#                 small; 64 KB (one GSO packet) still reaches 1gbit, 16 KB falls below it (bench/RESULTS.md,
#                 "--measure over a token bucket"). 256 KB let a 250 KB gradient through at veth speed every step.
#                 The old rule burst >= rate/HZ is for tick timers; tbf waits on hrtimers. On a 2-vCPU VM the veths
#                 move ~5 Gbit/s at most, so 10gbit is effectively unshaped there.
#   --delay TIME  added one-way latency (e.g. 0.1ms) via netem. Many CI/VM kernels have no netem
#                 (CONFIG_NET_SCH_NETEM unset, modules disabled); then this fails with a clear error.
# Shapes rtnet0 inside every host namespace with `tbf rate RATE burst 64kb latency 100ms` (egress =
# everything that host sends), so a 2-host allreduce is limited in both directions. Can be changed at
# any time, also while a job runs. Prints the resulting qdisc per host.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "netns-shape: ERROR: $*" >&2; exit 1; }
. "$HERE/common.sh"
RATE=; BURST=64kb; DELAY=
while [ $# -gt 0 ]; do
  case $1 in
    --burst) BURST=${2:?--burst needs a size}; shift 2;;
    --delay) DELAY=${2:?--delay needs a time}; shift 2;;
    -h|--help) usage;;
    -*) echo "netns-shape: ERROR: unknown option '$1'" >&2; usage;;
    *) [ -z "$RATE" ] || die "more than one RATE given"; RATE=$1; shift;;
  esac
done
[ -n "$RATE" ] || usage
need_root
[ -f "$NS_DIR/env" ] || die "no $NS_DIR/env - run scripts/cluster/netns-up.sh first"
HOSTS=$(sed -n 's/^RT_CLUSTER_HOSTS=//p' "$NS_DIR/env")
P=$(sed -n 's/^RT_CLUSTER_PREFIX=//p' "$NS_DIR/env")
[[ "$HOSTS" =~ ^[0-9]+$ ]] || die "corrupt $NS_DIR/env"
for ((i=0; i<HOSTS; i++)); do
  ns=$P$i
  ip -n "$ns" link show "$NS_IF" >/dev/null 2>&1 || die "$ns/$NS_IF missing - rerun netns-up.sh"
  tc -n "$ns" qdisc del dev "$NS_IF" root 2>/dev/null || true
  if [ -n "$DELAY" ]; then
    args=(netem delay "$DELAY"); [ "$RATE" = none ] || args+=(rate "$RATE")
    tc -n "$ns" qdisc add dev "$NS_IF" root "${args[@]}" 2>/dev/null \
      || die "netem is not available in this kernel (CONFIG_NET_SCH_NETEM): latency cannot be emulated here; use RATE alone (tbf)"
  elif [ "$RATE" != none ]; then
    tc -n "$ns" qdisc add dev "$NS_IF" root tbf rate "$RATE" burst "$BURST" latency 100ms \
      || die "tc tbf rate $RATE burst $BURST failed on $ns/$NS_IF"
  fi
done
for ((i=0; i<HOSTS; i++)); do echo "netns-shape: $P$i: $(tc -n "$P$i" qdisc show dev "$NS_IF" | head -n1)"; done >&2
