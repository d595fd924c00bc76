# shellcheck shell=bash disable=SC2034  # sourced: SRC, BIN, SL are used by the tests
# lib.sh - shared by the cluster tests (sourced): results, skips, waiting for Slurm jobs, reading summaries.
# A test prints "PASS: ..." / "FAIL: ..." per check and ends with finish; a machine that cannot run it (not root,
# no network namespaces, no Slurm) ends with skip REASON, exit 77 = ctest's SKIP_RETURN_CODE (never a silent pass).
SRC=${RINGTRAIN_SOURCE_DIR:?RINGTRAIN_SOURCE_DIR is set by ctest}
BIN=${RINGTRAIN_BIN:?RINGTRAIN_BIN is set by ctest}
pass=0; fail=0
ok()  { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ] && [ "$pass" -gt 0 ] || exit 1; exit 0; }
skip() { echo "SKIPPED: $*"; exit 77; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

need_root_netns() {
  [ "$(id -u)" = 0 ] || skip "needs root (network namespaces, Slurm daemons)"
  command -v ip >/dev/null || skip "no 'ip' (apt-get install iproute2)"
  command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare/nsenter (util-linux)"
  unshare --net --uts true 2>/dev/null || skip "cannot make network namespaces here (unshare --net failed: no CAP_SYS_ADMIN?)"
  ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here"
}
need_slurm() {
  local c
  for c in slurmctld slurmd sbatch srun scontrol scancel sinfo munged munge; do
    command -v "$c" >/dev/null || skip "Slurm is not installed ('$c' missing; scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
  done
}
need_fashion() {
  [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte ] || [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] \
    || skip "no Fashion-MNIST in /usr/share/datasets/fashion-mnist (scripts/setup.sh installs dataset-fashion-mnist)"
}

# json FILE EXPR: a value of summary.json etc. (python3 expression on `s`)
json() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# job_field JOB FIELD: one field of `scontrol show job` (JobState, ExitCode, Restarts, Reason ...)
job_field() { $SL scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
# wait_job JOB SECONDS: until the job has ended (polled every 0.2 s: sbatch --wait polls every 2-10 s); prints the
# final JobState; 1 on timeout
wait_job() {
  local j=$1 end=$(( $(date +%s) + $2 )) st
  while :; do
    st=$(job_field "$j" JobState)
    case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE) echo "$st"; return 0;; esac
    [ "$(date +%s)" -lt "$end" ] || { echo "still-$st"; return 1; }
    sleep 0.2
  done
}
# wait_steps FILE N SECONDS [PID]: until metrics.jsonl FILE logs a global_step >= N (1 at the timeout, or once
# process PID has ended)
wait_steps() {
  local f=$1 n=$2 end=$(( $(date +%s) + $3 )) pid=${4:-}
  while [ "$(date +%s)" -lt "$end" ]; do
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    [ -f "$f" ] && [ "$(sed -n 's/.*"global_step": *\([0-9]*\).*/\1/p' "$f" | sort -n | tail -n1)" -ge "$n" ] 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
