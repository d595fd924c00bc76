#!/usr/bin/env bash
# stop-slurm.sh - tear down the cluster started by start-slurm.sh.
#
# Usage (as root):  scripts/cluster/stop-slurm.sh [--purge]
#   --purge   also delete $RT_SLURM_DIR (config + logs); default keeps etc/ and log/
#
# Order: cancel all jobs (and wait for them) -> scontrol shutdown -> wait for the
# slurmctld/slurmd PIDs from our pid files (TERM, then KILL, both time-bounded) ->
# munged --stop (only if start-slurm.sh started it) -> remove the /etc/slurm/slurm.conf
# symlink if it points at our config -> remove state/spool/run.
# Idempotent: running it when nothing is up prints "not running" and exits 0.
# Only PIDs from our own pid files are signalled; nothing is killed by name.
# Exits 1 (loudly) if a daemon or a job step (slurmstepd) is still alive at the end.
#
# Knobs: RT_SLURM_DIR [/tmp/ringtrain-cluster/slurm], RT_SLURM_STOP_TIMEOUT [30]
set -euo pipefail

LAB=${RT_SLURM_DIR:-/tmp/ringtrain-cluster/slurm}
TIMEOUT=${RT_SLURM_STOP_TIMEOUT:-30}
CONF=$LAB/etc/slurm.conf
PURGE=0
[ "${1:-}" = --purge ] && PURGE=1

log() { echo "stop-slurm: $*" >&2; }
alive() {
  local pid=${1:-} st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
pidof_file() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }
# wait_dead SECONDS PID... : 0 when all are gone
wait_dead() {
  local t=$1; shift
  local end=$(( $(date +%s) + t )) p any
  while :; do
    any=0; for p in "$@"; do alive "$p" && any=1; done
    [ "$any" = 0 ] && return 0
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}
stepds() {  # slurmstepd processes (only reported, never killed by name)
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] && alive "${p#/proc/}" && echo "${p#/proc/}"
  done
  return 0
}

[ "$(id -u)" = 0 ] || { log "ERROR: must run as root"; exit 1; }

CTLD_PID=$(pidof_file "$LAB/run/slurmctld.pid")
SLURMD_PID=$(pidof_file "$LAB/run/slurmd.pid")
did=0; asked=0

if alive "$CTLD_PID" && [ -f "$CONF" ]; then
  export SLURM_CONF=$CONF
  jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    timeout 10 scancel $jobs || true
    end=$(( $(date +%s) + TIMEOUT ))
    while [ -n "$(timeout 10 squeue -h -o %A 2>/dev/null || true)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.5; done
  fi
  log "scontrol shutdown"
  if timeout 15 scontrol shutdown; then asked=1; else log "scontrol shutdown failed/timed out; falling back to signals"; fi
  did=1
fi

for name in slurmctld slurmd; do
  pid=$(pidof_file "$LAB/run/$name.pid")
  alive "$pid" || continue
  did=1
  # after a successful `scontrol shutdown` give it TIMEOUT s; otherwise nobody asked it to stop yet
  if ! wait_dead "$([ "$asked" = 1 ] && echo "$TIMEOUT" || echo 0)" "$pid"; then
    log "$name (pid $pid) still alive: SIGTERM"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_dead 10 "$pid"; then
      log "$name (pid $pid) ignores SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_dead 5 "$pid" || true
    fi
  fi
done

if [ -f "$LAB/munged.ours" ]; then
  mpid=$(pidof_file /run/munge/munged.pid)
  if alive "$mpid"; then
    log "stopping munged (pid $mpid)"
    timeout 15 munged --stop >/dev/null 2>&1 || kill -TERM "$mpid" 2>/dev/null || true
    wait_dead 10 "$mpid" || { kill -KILL "$mpid" 2>/dev/null || true; wait_dead 5 "$mpid" || true; }
    did=1
  fi
  rm -f "$LAB/munged.ours"
fi

if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$CONF" ]; then
  rm -f /etc/slurm/slurm.conf
fi

# ---------------------------------------------------------------- verify
bad=0
for pid in "$CTLD_PID" "$SLURMD_PID" "${mpid:-}"; do
  if alive "$pid"; then log "ERROR: pid $pid ($(cat /proc/$pid/comm 2>/dev/null)) is still alive"; bad=1; fi
done
left=$(stepds | tr '\n' ' ')
if [ -n "${left// /}" ]; then
  log "ERROR: slurmstepd still running (pids: $left) - a job step did not end; inspect and kill those PIDs"
  bad=1
fi
[ "$bad" = 0 ] || exit 1

rm -rf "$LAB/state" "$LAB/spool" "$LAB/run" "$LAB/env.sh"
[ "$PURGE" = 1 ] && rm -rf "$LAB"
if [ "$did" = 1 ]; then log "stopped"; else log "not running (nothing to stop)"; fi
