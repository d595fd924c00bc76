#!/usr/bin/env bash
# netns-down.sh - remove everything netns-up.sh made: ends the processes still inside the namespaces
# (by PID, from `ip netns pids`; TERM, then KILL after 5 s), deletes the namespaces (which deletes the
# veths and the bridge), /etc/netns/<ns>/ and /tmp/ringtrain-cluster/netns-<prefix>.
# Idempotent; exits 1 if a namespace is left behind.
#
# Usage (as root):  scripts/cluster/netns-down.sh [-q]      -q: silent when there is nothing to remove
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "netns-down: ERROR: $*" >&2; exit 1; }
. "$HERE/common.sh"
QUIET=0
case ${1:-} in -q) QUIET=1;; "") ;; -h|--help) usage;;
  *) die "unknown argument '$1'";; esac
need_root

mapfile -t NSS < <(ns_list)
pids=()
for ns in "${NSS[@]}"; do
  while read -r pid; do [ -n "$pid" ] && pids+=("$pid"); done < <(ip netns pids "$ns" 2>/dev/null || true)
done
if [ "${#pids[@]}" -gt 0 ]; then
  echo "netns-down: ending ${#pids[@]} process(es) left in the namespaces: ${pids[*]}" >&2
  kill -TERM "${pids[@]}" 2>/dev/null || true
  end=$(( $(date +%s) + 5 ))
  while :; do
    left=(); for p in "${pids[@]}"; do alive "$p" && left+=("$p"); done
    [ "${#left[@]}" = 0 ] && break
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "netns-down: SIGKILL to ${left[*]}" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true; sleep 0.5; break
    fi
    sleep 0.1
  done
fi
for ns in "${NSS[@]}"; do
  ip netns del "$ns" || echo "netns-down: WARNING: ip netns del $ns failed" >&2
  rm -rf "/etc/netns/$ns"
done
rmdir /etc/netns 2>/dev/null || true
rm -rf "$NS_DIR"

remaining=$(ns_list | tr '\n' ' ')
[ -z "${remaining// /}" ] || die "namespaces still present: $remaining"
if [ "${#NSS[@]}" -gt 0 ]; then echo "netns-down: removed ${NSS[*]}" >&2
elif [ "$QUIET" = 0 ]; then echo "netns-down: nothing to remove" >&2; fi
