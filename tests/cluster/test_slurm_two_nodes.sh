#!/usr/bin/env bash
# test_slurm_two_nodes.sh - a two-node Slurm in network namespaces (scripts/cluster/slurm-netns.sh: hosts rtts0 and
# rtts1, each with its own host name, address and slurmd) runs scripts/slurm/cpu.sbatch -N2 as written in the docs:
# a rank per node, srun --mpi=pmix across the nodes, MPI over TCP between them (the bytes cross both hosts' veths),
# the same parameters on both ranks. Needs root, network namespaces and Slurm; else SKIPPED (exit 77). ~15 s.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
need_root_netns
need_slurm
need_fashion
T0=$(now)

W=$(mktemp -d /tmp/rt-slurm2-test.XXXXXX)
export RT_CLUSTER_DIR=$W RT_CLUSTER_PREFIX=${RT_TEST_NETNS_PREFIX:-rtts}
NS=$SRC/scripts/cluster/slurm-netns.sh
SL="$NS exec"
cleanup() {
  "$NS" down >/dev/null 2>&1 || "$NS" down
  if [ "$fail" = 0 ]; then rm -rf "$W"; else echo "kept $W for inspection"; fi
}
trap cleanup EXIT
"$NS" up -n 2 2>/dev/null || { bad "slurm-netns.sh up -n 2"; "$NS" up -n 2; finish; }
ok "two-node Slurm up: $($SL sinfo -h -N -o '%N=%T' | tr '\n' ' ')($(since "$T0") s)"

S=$W/submit; mkdir -p "$S" && cd "$S" || exit 1
ln -s "$SRC/scripts" scripts; ln -s "$SRC/configs" configs; ln -s "$SRC/models" models
PATH=$(dirname "$BIN"):$PATH; export PATH
unset RINGTRAIN_BIN RINGTRAIN_ROOT RINGTRAIN_SWEEP
tx() { ip netns exec "$RT_CLUSTER_PREFIX$1" cat /sys/class/net/rtnet0/statistics/tx_bytes; }
tx0=$(tx 0); tx1=$(tx 1)

# the docs' command, as written
j=$($NS exec sbatch --parsable -N2 scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
st=$(wait_job "$j" 120)
f=$S/ringtrain-cpu-$j.out; sum=runs/ringtrain-cpu/summary.json
sent=$(json $sum 'min(s["bytes_sent_per_rank"])')
d0=$(( $(tx 0) - tx0 )); d1=$(( $(tx 1) - tx1 ))
if [ "$st" = COMPLETED ] && [ "$(json $sum 's["world_size"]')" = 2 ] && [ "$(json $sum 's["parameters_identical"]')" = True ] \
   && grep -q "on ${RT_CLUSTER_PREFIX}\[0-1\]: 2 rank(s)" "$f" && [ -n "$sent" ] && [ "$d0" -ge "$sent" ] && [ "$d1" -ge "$sent" ]; then
  ok "sbatch -N2 scripts/slurm/cpu.sbatch configs/logreg_fashion.json: $st, a rank on each of ${RT_CLUSTER_PREFIX}0/${RT_CLUSTER_PREFIX}1, TCP bytes sent by the hosts $d0 / $d1 >= $sent per rank"
else
  bad "two-node cpu.sbatch: state $st, bytes over the veths $d0 / $d1 (ranks sent >= ${sent:-?})"
  tail -n 20 "$f"
fi

# the docs' 4-rank example: two ranks on each node (shared memory inside a node, TCP between them); from a second
# folder, as runs/ringtrain-cpu there holds the 2-rank run (which the same job name would resume)
S=$W/submit4; mkdir -p "$S" && cd "$S" || exit 1
ln -s "$SRC/scripts" scripts; ln -s "$SRC/configs" configs; ln -s "$SRC/models" models
j=$($NS exec sbatch --parsable -N2 --ntasks-per-node=2 -c1 -t 00:30:00 scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
st=$(wait_job "$j" 120)
f=$S/ringtrain-cpu-$j.out
if [ "$st" = COMPLETED ] && [ "$(json $sum 's["world_size"]')" = 4 ] && [ "$(json $sum 's["parameters_identical"]')" = True ] \
   && grep -q "on ${RT_CLUSTER_PREFIX}\[0-1\]: 4 rank(s)" "$f"; then
  ok "sbatch -N2 --ntasks-per-node=2 -c1 -t 00:30:00 scripts/slurm/cpu.sbatch configs/logreg_fashion.json: $st, 4 ranks on 2 nodes"
else bad "two-node, 4 ranks: state $st"; tail -n 20 "$f"; fi

echo "test_slurm_two_nodes: $(since "$T0") s"
finish
