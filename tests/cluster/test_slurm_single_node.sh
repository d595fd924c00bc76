#!/usr/bin/env bash
# test_slurm_single_node.sh - a private single-node Slurm (scripts/cluster/start-slurm.sh: munged + slurmctld +
# slurmd, own directory and ports, 2 pretend GPUs, 66 advertised CPUs) runs scripts/slurm/*.sbatch UNEDITED, only
# with sbatch options:
#   1. the docs' first example completes and writes summary.json (2 ranks); the same from outside the checkout; the
#      same again once it has finished (the resubmission docs/slurm.md advises): nothing left to train, exit 0,
#      summary.json kept
#   2. a reference run of the longer job used below
#   3. the time-limit warning (scancel --batch --signal=USR1, what --signal=B:USR1@120 sends) mid-run: the batch
#      shell forwards it, the ranks checkpoint and exit 3, the job requeues itself and the requeued run resumes
#      to the reference run's parameters (parameter_hash_per_rank)
#   4. USR1 to the ranks (scancel --signal=USR1): exit 3, summary "stopped"; a resubmission with the same -J
#      resumes to the reference parameters
#   5. plain scancel (SIGTERM to the ranks): a checkpoint, summary "stopped" by SIGTERM
#   6. gpu.sbatch on the pretend GPUs (one rank per GPU; --set device=cpu --set sync.backend=ring: no CUDA here);
#      -c 65: data.workers stops at ringtrain's 64; --set=key=value replaces the scripts' settings as --set key=value
#   7. the docs' array sweep (RINGTRAIN_SWEEP, %A_%a): one run per line, each its own folder and learning rate
#   8. no binary / no config: exit 2 and one line saying what to do; a step that ends 0 without a summary: exit 1,
#      in an empty folder and in a finished run's
# Needs root and Slurm (slurmctld slurmd slurm-client munge); else SKIPPED (exit 77). ~1 min on 2 cores.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (the Slurm daemons run as SlurmUser=root)"
need_slurm
need_fashion
T0=$(now)

W=$(mktemp -d /tmp/rt-slurm-test.XXXXXX)
# a fixed Slurm directory: a cluster left behind by a killed run of this test is found by its pid files and stopped
# 66 CPUs (config_overrides; task/none binds nothing): -c 65 is schedulable, for gpu.sbatch's data.workers cap (6)
export RT_SLURM_DIR=${RT_CLUSTER_DIR:-/tmp/ringtrain-cluster}/slurm-ctest RT_SLURM_LINK_ETC=0 RT_SLURM_INSTALL=0 RT_SLURM_GPUS=2 \
       RT_SLURM_CPUS=66
export SLURMCTLD_PORT=${RT_TEST_SLURMCTLD_PORT:-16917} SLURMD_PORT=${RT_TEST_SLURMD_PORT:-16918}
export SLURM_CONF=$RT_SLURM_DIR/etc/slurm.conf
for v in $(compgen -e | grep '^SLURM_' | grep -v '^SLURM_CONF$' || true); do unset "$v"; done
export SL=   # job_field/wait_job run scontrol directly (in the two-node test: through slurm-netns.sh exec)
cleanup() {
  if [ "$fail" = 0 ]; then
    "$SRC/scripts/cluster/stop-slurm.sh" --purge >/dev/null 2>&1 || "$SRC/scripts/cluster/stop-slurm.sh" --purge
    rm -rf "$W"
  else
    "$SRC/scripts/cluster/stop-slurm.sh" >/dev/null 2>&1 || "$SRC/scripts/cluster/stop-slurm.sh"
    echo "kept $W and $RT_SLURM_DIR/log for inspection"
  fi
}
trap cleanup EXIT
"$SRC/scripts/cluster/stop-slurm.sh" >/dev/null 2>&1 || { bad "stop-slurm.sh could not clear a cluster left in $RT_SLURM_DIR"; finish; }
"$SRC/scripts/cluster/start-slurm.sh" >/dev/null || { bad "start-slurm.sh"; finish; }
ok "private single-node Slurm up ($(since "$T0") s)"

# Submit from a folder that looks like the checkout (scripts/, configs/, models/ linked), so the docs' commands run
# as written and their runs/ and logs land here. The binary comes from PATH (nothing in build/ here).
S=$W/submit; mkdir -p "$S" && cd "$S" || exit 1
ln -s "$SRC/scripts" scripts; ln -s "$SRC/configs" configs; ln -s "$SRC/models" models
PATH=$(dirname "$BIN"):$PATH; export PATH
unset RINGTRAIN_BIN RINGTRAIN_ROOT RINGTRAIN_SWEEP
submit() { sbatch --parsable "$@" | cut -d';' -f1; }
log_of() { echo "$S/$1-$2.out"; }     # the scripts' default --output=%x-%j.out
show_log() { echo "---- $1"; tail -n 15 "$1" 2>/dev/null; }

# 1. the docs' example, as written
j=$(submit -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
st=$(wait_job "$j" 120)
sum=runs/ringtrain-cpu/summary.json
if [ "$st" = COMPLETED ] && [ "$(json $sum 's["world_size"]')" = 2 ] && [ "$(json $sum 's["parameters_identical"]')" = True ]; then
  ok "sbatch -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json: $st, 2 ranks, $sum"
else bad "cpu.sbatch -n2 -c1: state $st"; show_log "$(log_of ringtrain-cpu "$j")"; fi

# 1b. submitted from outside any checkout, by the script's real path: the config is found in the script's checkout
# (Slurm runs a spooled copy; the script reads its own path from scontrol's Command=), the binary there or on PATH
O=$W/elsewhere; mkdir -p "$O" && cd "$O" || exit 1
j=$(submit -J outside "$SRC/scripts/slurm/cpu.sbatch" configs/logreg_fashion.json --set train.max_steps=50)
st=$(wait_job "$j" 120); f=$O/outside-$j.out
if [ "$st" = COMPLETED ] && [ -f runs/outside/summary.json ] && grep -Eq "($SRC/build/ringtrain|$BIN) " "$f"; then
  ok "from $O: sbatch \$SRC/scripts/slurm/cpu.sbatch configs/logreg_fashion.json: $st"
else bad "submitted from outside the checkout: state $st"; show_log "$f"; fi
cd "$S" || exit 1

# 1c. the docs' example again, after it finished (a resubmission with the same job name, or a requeue): ringtrain
# finds nothing left to train and keeps the finished run's summary.json; the job completes (not "wrote no summary")
sha=$(sha256sum "$sum" 2>/dev/null)
j=$(submit -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
st=$(wait_job "$j" 120); f=$(log_of ringtrain-cpu "$j")
if [ "$st" = COMPLETED ] && grep -q '^ringtrain: nothing left to train' "$f" \
   && grep -q '^cpu.sbatch: nothing left to train: the run in runs/ringtrain-cpu had already finished' "$f" \
   && ! grep -q ERROR "$f" && [ -n "$sha" ] && [ "$(sha256sum "$sum")" = "$sha" ]; then
  ok "the docs' example resubmitted after it finished: $st, nothing left to train, $sum kept"
else bad "resubmission of a finished run: state $st"; show_log "$f"; fi

# The longer job of checks 2-4: enough steps (~3 s of training) to be caught mid-run; every epoch also checkpoints.
LONG=(--set train.epochs=20 --set train.max_steps=3000 --set train.log_every_steps=20 --set output.progress=none)
# 2. reference
j=$(submit -J ref -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json "${LONG[@]}")
st=$(wait_job "$j" 180)
REF=$(json runs/ref/summary.json 's["parameter_hash_per_rank"]')
if [ "$st" = COMPLETED ] && [ "$(json runs/ref/summary.json 's["steps"]')" = 3000 ] && [ -n "$REF" ]; then
  ok "reference run: 3000 steps, parameter_hash_per_rank $REF"
else bad "reference run: state $st"; show_log "$(log_of ref "$j")"; fi

# 3. the time-limit warning to the batch shell -> forwarded -> checkpoint, exit 3 -> requeued -> resumed
j=$(submit -J pre -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json "${LONG[@]}")
if wait_steps runs/pre/metrics.jsonl 100 60; then
  scancel --batch --signal=USR1 "$j"
  # Slurm holds a requeued job for 120 s (its begin time); the test moves that to now, once the first run's
  # slurmstepds are gone (the new step would reuse their step id j.0 and its PMIx socket name) and 2 s after the
  # requeue (slurmd revokes the job's credentials with a time in whole seconds: a launch within the same second is
  # refused, "Job credential revoked")
  stepds() { grep -l "^slurmstepd: \[$j\." /proc/[0-9]*/cmdline 2>/dev/null; }
  end=$(( $(date +%s) + 60 ))
  until [ "$(job_field "$j" Restarts)" = 1 ] && [ "$(job_field "$j" JobState)" = PENDING ] && [ -z "$(stepds)" ] \
        || [ "$(date +%s)" -ge "$end" ]; do sleep 0.2; done
  sleep 2
  scontrol update JobId="$j" StartTime=now
  st=$(wait_job "$j" 180)
  f=$(log_of pre "$j")
  got=$(json runs/pre/summary.json 's["parameter_hash_per_rank"]')
  if [ "$st" = COMPLETED ] && grep -q 'SIGUSR1 received, forwarding' "$f" && grep -q 'ringtrain exited with 3' "$f" \
     && grep -q 'requeueing job' "$f" && grep -q '(restart 1)' "$f" && [ "$(grep -c '(restart 0)' "$f")" = 1 ] \
     && [ "$(json runs/pre/summary.json 's["resumed_from"] is not None')" = True ] && [ "$got" = "$REF" ]; then
    ok "scancel --batch --signal=USR1 mid-run: forwarded, exit 3, requeued, resumed; one log (append); parameters = reference"
  else bad "batch USR1 + requeue: state $st, hash $got vs $REF"; show_log "$f"; fi
else bad "job pre never logged step 100"; show_log "$(log_of pre "$j")"; fi

# 4. USR1 to the ranks -> exit 3 and a summary that says so -> resubmission resumes
j=$(submit -J sub -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json "${LONG[@]}")
if wait_steps runs/sub/metrics.jsonl 100 60; then
  scancel --signal=USR1 "$j"
  st=$(wait_job "$j" 60)
  stopped=$(json runs/sub/summary.json 's.get("stopped")')
  steps=$(json runs/sub/summary.json 's["steps"]')
  ls runs/sub/checkpoints/ckpt-*"$steps".bin >/dev/null 2>&1; ck=$?
  if [ "$st" = FAILED ] && [ "$(job_field "$j" ExitCode)" = 3:0 ] && [[ "$stopped" == *SIGUSR1* ]] && [ "$ck" = 0 ] \
     && [ "${steps:-0}" -lt 3000 ]; then
    ok "scancel --signal=USR1: exit 3, summary stopped '$stopped', checkpoint at step $steps"
  else bad "step USR1: state $st exit $(job_field "$j" ExitCode) stopped '$stopped' steps $steps checkpoint $ck"; show_log "$(log_of sub "$j")"; fi
  j=$(submit -J sub -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json "${LONG[@]}")
  st=$(wait_job "$j" 180)
  got=$(json runs/sub/summary.json 's["parameter_hash_per_rank"]')
  if [ "$st" = COMPLETED ] && [ "$got" = "$REF" ] && [ "$(json runs/sub/summary.json 's["resumed_from"] is not None')" = True ]; then
    ok "resubmitted with the same -J: resumed, parameters = reference"
  else bad "resubmission: state $st, hash $got vs $REF"; show_log "$(log_of sub "$j")"; fi
else bad "job sub never logged step 100"; show_log "$(log_of sub "$j")"; fi

# 5. plain scancel: SIGTERM reaches the ranks once; they checkpoint before Slurm's KillWait runs out
j=$(submit -J term -n2 -c1 scripts/slurm/cpu.sbatch configs/logreg_fashion.json "${LONG[@]}")
if wait_steps runs/term/metrics.jsonl 100 60; then
  scancel "$j"
  st=$(wait_job "$j" 60)
  stopped=$(json runs/term/summary.json 's.get("stopped")')
  if [ "$st" = CANCELLED ] && [[ "$stopped" == *SIGTERM* ]] && ls runs/term/checkpoints/ckpt-*.bin >/dev/null 2>&1; then
    ok "scancel (SIGTERM): checkpoint written, summary stopped '$stopped'"
  else bad "scancel: state $st, stopped '$stopped'"; show_log "$(log_of term "$j")"; fi
else bad "job term never logged step 100"; fi

# 6. the GPU script's allocation: a rank per (pretend) GPU; CUDA is absent, so the run itself is on the CPU
j=$(submit --gpus-per-node=2 -c1 scripts/slurm/gpu.sbatch configs/logreg_fashion.json --set device=cpu --set sync.backend=ring)
st=$(wait_job "$j" 120)
f=$(log_of ringtrain-gpu "$j")
if [ "$st" = COMPLETED ] && [ "$(json runs/ringtrain-gpu/summary.json 's["world_size"]')" = 2 ] \
   && grep -q 'GPUs on this node: 2' "$f" && grep -q 'data.workers=1' "$f"; then
  ok "sbatch --gpus-per-node=2 -c1 scripts/slurm/gpu.sbatch: 2 ranks (one per GPU), data.workers from -c"
else bad "gpu.sbatch: state $st"; show_log "$f"; fi
# 6b. -c 65: data.workers = CPUs per task stops at 64 (ringtrain refuses more); each of the script's other settings
# replaced by --set=key=value, ringtrain's one-word spelling (the summary.json check follows that output.dir too)
j=$(submit -J gpu-wide --gpus-per-node=1 -c 65 scripts/slurm/gpu.sbatch configs/logreg_fashion.json --set=device=cpu \
      --set=sync.backend=ring --set=train.threads=1 --set=output.dir=runs/gpu-eq --set=checkpoint.resume=auto \
      --set=train.max_steps=3)
st=$(wait_job "$j" 120); f=$(log_of gpu-wide "$j")
if [ "$st" = COMPLETED ] && grep -q ' x 65 CPU(s), .*ringtrain --set data.workers=64$' "$f" \
   && [ "$(json runs/gpu-eq/summary.json 's["steps"]')" = 3 ] && [ ! -e runs/gpu-wide ]; then
  ok "gpu.sbatch -c 65 with --set=key=value for device, sync.backend, train.threads, output.dir, checkpoint.resume: data.workers=64"
else bad "gpu.sbatch -c 65 / --set=key=value: state $st"; show_log "$f"; fi
# 6c. the same spelling for cpu.sbatch's settings
j=$(submit -J cpu-eq scripts/slurm/cpu.sbatch configs/logreg_fashion.json --set=train.threads=1 \
      --set=output.dir=runs/cpu-eq-x --set=checkpoint.resume=auto --set=train.max_steps=3)
st=$(wait_job "$j" 120); f=$(log_of cpu-eq "$j")
if [ "$st" = COMPLETED ] && grep -q ' x 1 thread(s), .*ringtrain $' "$f" && [ "$(json runs/cpu-eq-x/summary.json 's["steps"]')" = 3 ] \
   && [ ! -e runs/cpu-eq ]; then
  ok "cpu.sbatch with --set=key=value for train.threads, output.dir, checkpoint.resume: no setting of its own left"
else bad "cpu.sbatch --set=key=value: state $st"; show_log "$f"; fi

# 7. the docs' sweep, as written: one run per line of the sweep file, each in runs/lr-sweep/<task>
j=$(RINGTRAIN_SWEEP=scripts/slurm/lr-sweep.txt submit -J lr-sweep --array=0-2 -o %x-%A_%a.out scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
sts=; for t in 0 1 2; do sts+="$(wait_job "${j}_$t" 180) "; done
lrs=$(for t in 0 1 2; do json runs/lr-sweep/$t/summary.json 's["lr"]'; done | tr '\n' ' ')
if [ "$sts" = "COMPLETED COMPLETED COMPLETED " ] && [ "$(echo $lrs | tr ' ' '\n' | sort -u | wc -l)" = 3 ] \
   && ls "$S"/lr-sweep-"${j}"_{0,1,2}.out >/dev/null; then
  ok "array sweep --array=0-2: 3 runs, learning rates $lrs, logs lr-sweep-${j}_N.out"
else bad "array sweep: states $sts lrs $lrs"; show_log "$S/lr-sweep-${j}_0.out"; fi

# 8. what cannot start says so in one line, exit 2
j=$(RINGTRAIN_ROOT=/nonexistent submit -J nobin scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
wait_job "$j" 60 >/dev/null; f=$(log_of nobin "$j")
[ "$(job_field "$j" ExitCode)" = 2:0 ] && [ "$(wc -l <"$f")" = 1 ] && grep -q 'ERROR: RINGTRAIN_ROOT=/nonexistent has no build/ringtrain' "$f" \
  && ok "no binary: exit 2, '$(cat "$f")'" || { bad "no binary: exit $(job_field "$j" ExitCode)"; show_log "$f"; }
j=$(submit -J noconf scripts/slurm/cpu.sbatch)
wait_job "$j" 60 >/dev/null; f=$(log_of noconf "$j")
[ "$(job_field "$j" ExitCode)" = 2:0 ] && grep -q 'usage: sbatch' "$f" \
  && ok "no config: exit 2, '$(cat "$f")'" || { bad "no config: exit $(job_field "$j" ExitCode)"; show_log "$f"; }

# a step that "succeeds" without ringtrain running (srun answers 0 for tasks that never launched): exit 1, said
j=$(RINGTRAIN_BIN=/bin/true submit -J notrun scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
wait_job "$j" 60 >/dev/null; f=$(log_of notrun "$j")
[ "$(job_field "$j" ExitCode)" = 1:0 ] && grep -q 'ERROR: srun returned 0 but ringtrain wrote no runs/notrun/summary.json' "$f" \
  && ok "a step that exits 0 without a summary: exit 1, said so" || { bad "no summary: exit $(job_field "$j" ExitCode)"; show_log "$f"; }
# ... also where a finished run's summary.json is (1): an old summary is no sign that this step ran
j=$(RINGTRAIN_BIN=/bin/true submit scripts/slurm/cpu.sbatch configs/logreg_fashion.json)
wait_job "$j" 60 >/dev/null; f=$(log_of ringtrain-cpu "$j")
[ "$(job_field "$j" ExitCode)" = 1:0 ] && grep -q 'ERROR: srun returned 0 but ringtrain wrote no runs/ringtrain-cpu/summary.json' "$f" \
  && ok "a step that exits 0 without running, in a finished run's folder: exit 1, said so" \
  || { bad "no run in a finished run's folder: exit $(job_field "$j" ExitCode)"; show_log "$f"; }

echo "test_slurm_single_node: $(since "$T0") s"
finish
