#!/usr/bin/env bash
# mpirun-netns.sh - run an Open MPI job across the emulated hosts from netns-up.sh, over TCP through
# the veths and the bridge (so tc shaping applies), with no sshd.
#
# Usage (as root):  scripts/cluster/mpirun-netns.sh -np N [mpirun options] -- PROGRAM [ARGS...]
#   e.g.  scripts/cluster/mpirun-netns.sh -np 2 -- build/ringtrain info
# Without `--` everything is handed to mpirun as is.
# mpirun runs inside <prefix>0 (hostname rt0) with --hostfile /tmp/ringtrain-cluster/netns-rt/hostfile and
#   plm=rsh, plm_rsh_agent=netns-rsh-agent.sh (ip netns exec + unshare --uts), plm_rsh_no_tree_spawn=1
#   pml=ob1, btl=tcp,self, osc=^ucx   (no UCX, no shared memory: every rank-to-rank byte goes over TCP)
#   btl_tcp_if_include = oob_tcp_if_include = the /24 of netns-up.sh
#   rmaps_base_mapping_policy=node    (ranks round-robin over hosts; --map-by overrides)
#   hwloc_base_binding_policy=none    (= --bind-to none: every emulated host sees the same cores and each
#                                      orted would bind its first rank to core 0 -> all ranks on one core)
#   OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1; SLURM_* dropped so an enclosing Slurm job does not hijack it.
# Any of these can be overridden with --mca on the command line. The working directory is kept.
# Knobs: RT_CLUSTER_TIMEOUT seconds before the whole job is killed [600]; see common.sh for the rest.
# Exit status: the job's (a rank's non-zero exit propagates; 137 when a rank was SIGKILLed); 124 only when
# RT_CLUSTER_TIMEOUT hit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "mpirun-netns: ERROR: $*" >&2; exit 1; }
. "$HERE/common.sh"
T=${RT_CLUSTER_TIMEOUT:-600}
[ $# -gt 0 ] || usage
case $1 in -h|--help) usage;; esac
need_root
[ -f "$NS_DIR/env" ] || die "no $NS_DIR/env - run scripts/cluster/netns-up.sh N first"
[[ "$T" =~ ^[0-9]+$ ]] || die "RT_CLUSTER_TIMEOUT must be whole seconds (got '$T')"
command -v mpirun >/dev/null || die "mpirun not found (apt-get install openmpi-bin)"
SUBNET=$(sed -n 's/^RT_CLUSTER_SUBNET=//p' "$NS_DIR/env")
P=$(sed -n 's/^RT_CLUSTER_PREFIX=//p' "$NS_DIR/env")
[ -e "/run/netns/${P}0" ] || die "namespace ${P}0 is gone - rerun scripts/cluster/netns-up.sh"

# split "[mpirun args] -- prog args"
mpi_args=() prog=() seen=0
for a in "$@"; do
  if [ "$seen" = 0 ] && [ "$a" = -- ]; then seen=1; continue; fi
  if [ "$seen" = 0 ]; then mpi_args+=("$a"); else prog+=("$a"); fi
done
if [ "$seen" = 1 ]; then
  [ "${#prog[@]}" -gt 0 ] || die "nothing after '--' (usage: mpirun-netns.sh -np N [mpirun args] -- PROGRAM [ARGS])"
  command -v "${prog[0]}" >/dev/null || [ -x "${prog[0]}" ] || die "program '${prog[0]}' not found or not executable"
fi

for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm=rsh OMPI_MCA_plm_rsh_agent="$HERE/netns-rsh-agent.sh" OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_osc=^ucx
export OMPI_MCA_btl_tcp_if_include=$SUBNET OMPI_MCA_oob_tcp_if_include=$SUBNET
export OMPI_MCA_rmaps_base_mapping_policy=${OMPI_MCA_rmaps_base_mapping_policy:-node}
export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
rc=0; t0=$(date +%s)
timeout --kill-after=10 "$T" ip netns exec "${P}0" unshare --uts -- \
  /bin/sh -c 'hostname "$1" && shift && exec mpirun "$@"' mpirun-netns "${P}0" \
  --hostfile "$NS_DIR/hostfile" "${mpi_args[@]}" ${prog[@]+"${prog[@]}"} || rc=$?
# timeout(1) answers 124 when it stopped the job (137 when it had to SIGKILL it too), but mpirun itself answers
# 137 when a rank was SIGKILLed: only a job that ran for the whole limit was stopped by us.
if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ $(( $(date +%s) - t0 )) -ge "$T" ]; then
  echo "mpirun-netns: ERROR: job killed after RT_CLUSTER_TIMEOUT=${T}s" >&2
  exit 124
fi
exit "$rc"
