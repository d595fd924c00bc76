#!/usr/bin/env bash
# start-slurm.sh - bring up a real single-node Slurm cluster (munged + slurmctld + slurmd)
# on this machine, without systemd, and wait until the node is "idle".
#
# Usage (as root):   scripts/cluster/start-slurm.sh            then:  export SLURM_CONF=<printed path>
#                    scripts/cluster/stop-slurm.sh             (tears it all down again)
#
# Idempotent: if the cluster is already up and healthy it just says so and exits 0;
# if it is half up (stale pid files, one daemon dead) it stops the rest and starts clean.
# Every wait is time-bounded; on failure it prints the daemon log tails and exits 1.
#
# Knobs (environment):
#   RT_SLURM_DIR        config/state/log directory               [/tmp/ringtrain-cluster/slurm]
#   RT_SLURM_TIMEOUT    seconds to wait for the node to be idle  [60]
#   RT_SLURM_INSTALL    1 = apt-get install missing packages     [1]
#   RT_SLURM_LINK_ETC   1 = symlink /etc/slurm/slurm.conf to the generated file so that srun/sbatch
#                       work without SLURM_CONF (only if that path is free or already our link) [1]
#   RT_SLURM_CPUS       advertise this many CPUs instead of the real count (more ranks than cores;
#                       uses SlurmdParameters=config_overrides)  [real]
#   RT_SLURM_PARTITION  partition name                           [debug]
#   RT_SLURM_GPUS       advertise this many pretend GPUs as gres gpu (stand-in device files, no CUDA): lets
#                       --gpus-per-task / --gpus-per-node jobs be scheduled on a machine without GPUs [0]
#   SLURMCTLD_PORT / SLURMD_PORT                                 [6817 / 6818]
set -euo pipefail

LAB=${RT_SLURM_DIR:-/tmp/ringtrain-cluster/slurm}
TIMEOUT=${RT_SLURM_TIMEOUT:-60}
INSTALL=${RT_SLURM_INSTALL:-1}
LINK_ETC=${RT_SLURM_LINK_ETC:-1}
PARTITION=${RT_SLURM_PARTITION:-debug}
CTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
CONF=$LAB/etc/slurm.conf
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T0=$(date +%s.%N)

log() { echo "start-slurm: $*" >&2; }
die() {
  echo "start-slurm: ERROR: $*" >&2
  for f in "$LAB"/log/slurmctld.log "$LAB"/log/slurmd.log /var/log/munge/munged.log; do
    [ -f "$f" ] && { echo "---- tail $f" >&2; tail -n 25 "$f" >&2; }
  done
  exit 1
}
. "$HERE/slurm-common.sh"
# alive PID: running and not a zombie (PID 1 here may reap daemons late; kill -0 is true for zombies)
alive() {
  local pid=${1:-} st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
pidof_file() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }
node_state() { SLURM_CONF=$CONF timeout 5 sinfo -h -N -n "$HOST" -o %T 2>/dev/null | head -n1 || true; }

[ "$(id -u)" = 0 ] || die "must run as root (slurmd/slurmctld run as SlurmUser=root here)"

# ---------------------------------------------------------------- packages
need_install=0
for b in slurmctld slurmd sinfo srun sbatch scontrol munged munge unmunge; do
  command -v "$b" >/dev/null 2>&1 || need_install=1
done
if [ "$need_install" = 1 ]; then
  [ "$INSTALL" = 1 ] || die "Slurm/munge binaries missing; apt-get install slurmctld slurmd slurm-client munge"
  log "installing slurmctld slurmd slurm-client munge (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { timeout 600 apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
                    slurmctld slurmd slurm-client munge >"${LAB%/*}/apt-slurm.log" 2>&1; }
  mkdir -p "${LAB%/*}"
  apt_install || { timeout 300 apt-get -o DPkg::Lock::Timeout=300 update -qq && apt_install; } \
    || die "apt-get install failed, see ${LAB%/*}/apt-slurm.log"
fi

slurm_find_plugins

HOST=$(hostname -s)
[ -n "$HOST" ] || die "empty hostname"

# ---------------------------------------------------------------- already up?
CTLD_PID=$(pidof_file "$LAB/run/slurmctld.pid"); SLURMD_PID=$(pidof_file "$LAB/run/slurmd.pid")
if alive "$CTLD_PID" || alive "$SLURMD_PID"; then
  st=$(node_state)
  if alive "$CTLD_PID" && alive "$SLURMD_PID" && [[ "$st" =~ ^(idle|mixed|allocated) ]]; then
    log "already running (slurmctld pid $CTLD_PID, slurmd pid $SLURMD_PID, node $HOST $st)"
    echo "export SLURM_CONF=$CONF"
    exit 0
  fi
  log "half-running (ctld=${CTLD_PID:-none} slurmd=${SLURMD_PID:-none} node=${st:-?}); stopping first"
  RT_SLURM_DIR=$LAB "$HERE/stop-slurm.sh" || die "stop-slurm.sh failed while cleaning a half-running cluster"
fi
for p in "$CTLD_PORT" "$SLURMD_PORT"; do
  if ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
    die "TCP port $p already in use (another slurmctld/slurmd?): $(ss -Hltnp "sport = :$p")"
  fi
done

# ---------------------------------------------------------------- fresh dirs
rm -rf "$LAB/state" "$LAB/spool" "$LAB/run"
mkdir -p "$LAB"/{etc,state,spool/slurmd,log,run}
for f in slurmctld slurmd; do [ -f "$LAB/log/$f.log" ] && mv -f "$LAB/log/$f.log" "$LAB/log/$f.log.prev"; done

# ---------------------------------------------------------------- munge
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
chmod 0700 /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  mkdir -p /etc/munge
  if command -v mungekey >/dev/null 2>&1; then mungekey --create --keyfile=/etc/munge/munge.key --force
  else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }
if munge_ok; then
  log "munged already running (not started by us)"
else
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 || die "munged failed to start"
  echo started-by-start-slurm >"$LAB/munged.ours"
  for _ in $(seq 1 50); do munge_ok && break; sleep 0.2; done
  munge_ok || die "munged started but munge/unmunge round trip fails"
fi

# ---------------------------------------------------------------- slurm.conf
HWLINE=$(slurmd -C 2>/dev/null | head -n1)      # NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105
[[ "$HWLINE" == NodeName=* ]] || die "slurmd -C gave no NodeName line: $HWLINE"
NODEHW=${HWLINE#NodeName=* }                       # drop "NodeName=<x> "
EXTRA=
GPUS=${RT_SLURM_GPUS:-0}
[[ "$GPUS" =~ ^[0-9]+$ ]] || die "RT_SLURM_GPUS must be a whole number (got '$GPUS')"
GRES=
if [ "$GPUS" -gt 0 ]; then
  GRES="Gres=gpu:$GPUS"
  # slurmd counts a GPU only with a device file: character devices like /dev/null (1,3) stand in for them
  mkdir -p "$LAB/dev"
  for ((g=0; g<GPUS; g++)); do [ -c "$LAB/dev/fakegpu$g" ] || mknod "$LAB/dev/fakegpu$g" c 1 3 || die "mknod $LAB/dev/fakegpu$g failed"; done
  printf '# generated by start-slurm.sh: pretend GPUs (RT_SLURM_GPUS)\nAutoDetect=off\nName=gpu File=%s/dev/fakegpu[0-%s]\n' "$LAB" "$((GPUS - 1))" >"$LAB/etc/gres.conf"
else
  rm -f "$LAB/etc/gres.conf"
fi
if [ -n "${RT_SLURM_CPUS:-}" ]; then
  NODEHW="CPUs=$RT_SLURM_CPUS $(sed -n 's/.*\(RealMemory=[0-9]*\).*/\1/p' <<<"$HWLINE")"
  EXTRA="SlurmdParameters=config_overrides"
fi
cat >"$CONF.tmp" <<EOF
# generated by start-slurm.sh on $(date -u +%FT%TZ)
ClusterName=ringtrain
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/slurmd
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$(slurm_conf_policy)
${GRES:+GresTypes=gpu}
$EXTRA
NodeName=$HOST NodeAddr=127.0.0.1 $NODEHW $GRES State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
mv -f "$CONF.tmp" "$CONF"
echo "export SLURM_CONF=$CONF" >"$LAB/env.sh"

if [ "$LINK_ETC" = 1 ]; then
  mkdir -p /etc/slurm
  if [ -L /etc/slurm/slurm.conf ] || [ ! -e /etc/slurm/slurm.conf ]; then
    ln -sfn "$CONF" /etc/slurm/slurm.conf
  else
    log "WARNING: /etc/slurm/slurm.conf is a real file; not replacing it - export SLURM_CONF=$CONF"
  fi
fi

# ---------------------------------------------------------------- daemons
export SLURM_CONF=$CONF
# stdio to files so the daemons never hold a CI runner's pipes open
slurmctld -f "$CONF" </dev/null >>"$LAB/log/slurmctld.stdio" 2>&1 || die "slurmctld failed to start"
slurmd -f "$CONF" -N "$HOST" </dev/null >>"$LAB/log/slurmd.stdio" 2>&1 || die "slurmd failed to start"

deadline=$(( $(date +%s) + TIMEOUT ))
st=
while :; do
  CTLD_PID=$(pidof_file "$LAB/run/slurmctld.pid"); SLURMD_PID=$(pidof_file "$LAB/run/slurmd.pid")
  st=$(node_state)
  [ "$st" = idle ] && alive "$CTLD_PID" && alive "$SLURMD_PID" && break
  if [ -n "$CTLD_PID" ] && ! alive "$CTLD_PID"; then die "slurmctld (pid $CTLD_PID) died"; fi
  if [ -n "$SLURMD_PID" ] && ! alive "$SLURMD_PID"; then die "slurmd (pid $SLURMD_PID) died"; fi
  [ "$(date +%s)" -lt "$deadline" ] || die "node $HOST not idle after ${TIMEOUT}s (state='${st}'; $(SLURM_CONF=$CONF timeout 5 sinfo -R 2>&1 | tail -n +2))"
  sleep 0.25
done

T1=$(date +%s.%N)
log "up in $(awk -v a="$T0" -v b="$T1" 'BEGIN{printf "%.2f", b-a}')s: node $HOST $st, slurmctld pid $CTLD_PID, slurmd pid $SLURMD_PID, MpiDefault=$MPI_DEFAULT"
SLURM_CONF=$CONF sinfo >&2
echo "export SLURM_CONF=$CONF"
