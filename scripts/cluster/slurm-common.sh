# Shared by start-slurm.sh (one node on loopback) and slurm-netns.sh (N nodes in network namespaces): where Slurm's
# plugins are, and the slurm.conf lines both clusters use. Source it after defining die().

# Sets PLUGDIR (the folder holding select_cons_tres.so) and MPI_DEFAULT (pmix where its plugin exists, else none).
slurm_find_plugins() {
  PLUGDIR=
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    [ -e "$d/select_cons_tres.so" ] && { PLUGDIR=$d; break; }
  done
  [ -n "$PLUGDIR" ] || die "cannot find Slurm's plugin directory (select_cons_tres.so)"
  MPI_DEFAULT=none
  [ -e "$PLUGDIR/mpi_pmix.so" ] && MPI_DEFAULT=pmix
  return 0
}

# The scheduling and plugin part of slurm.conf: cores as the unit, no accounting, no mail.
slurm_conf_policy() {
  cat <<EOF2
PluginDir=$PLUGDIR
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=$MPI_DEFAULT
SchedulerType=sched/backfill
# schedule every second (defaults 60s/30s/3s) so back-to-back CI jobs start in ~1s, not ~5s
SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
KillOnBadExit=1
MailProg=/bin/true
EOF2
}
