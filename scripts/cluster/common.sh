# common.sh - shared settings for scripts/cluster/*.sh (sourced, not run).
# Knobs (environment):
#   RT_CLUSTER_DIR     scratch/state root                          [/tmp/ringtrain-cluster]
#   RT_CLUSTER_PREFIX  namespace name prefix: hosts <p>0.., switch <p>sw   [rt]
#                      Sets with different prefixes are independent (own bridge, own state dir; the
#                      same 10.77.0.x addresses do not clash because nothing routes between sets).
#   RT_CLUSTER_NET     first three octets of the private /24 used only inside the namespaces [10.77.0]
RT_CLUSTER_DIR=${RT_CLUSTER_DIR:-/tmp/ringtrain-cluster}
RT_CLUSTER_PREFIX=${RT_CLUSTER_PREFIX:-rt}
RT_CLUSTER_NET=${RT_CLUSTER_NET:-10.77.0}
NS_DIR=$RT_CLUSTER_DIR/netns-$RT_CLUSTER_PREFIX   # hostfile + env of this namespace set
NS_SW=${RT_CLUSTER_PREFIX}sw          # namespace holding the bridge
NS_IF=rtnet0                          # the host interface inside every host namespace
# ns_list: the namespaces made by netns-up.sh (only <prefix><digits> and <prefix>sw)
ns_list() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${RT_CLUSTER_PREFIX}([0-9]+|sw)\$" || true; }
# alive PID: running and not a zombie (PID 1 in these VMs reaps late; kill -0 is true for zombies)
alive() {
  local pid=${1:-} st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (ip netns, tc, unshare need CAP_NET_ADMIN + CAP_SYS_ADMIN)"; }
# usage: print the calling script's leading comment block (after the #! line) and exit 2
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 2; }
