#!/usr/bin/env bash
# One stage of scripts/device-check.sh, run by it under `timeout` (a stage is its own process group, so a stage out
# of time is stopped with everything it started). Not meant to be run by hand, though it can be, with the RT_*
# variables device-check.sh exports:
#   RT_BIN ringtrain   RT_BENCH_BIN bench_throughput   RT_LOGS results   RT_WORK scratch (data sets)   RT_PY python
#   RT_HAS_GPU 1|0     RT_CUDA_BUILD 1|0   RT_BUILD build dir   RT_GPU_TESTS 1|0 (the gpu tests were built)
#   RT_STAGE_DEADLINE epoch seconds: start nothing after it
# Usage: scripts/device-stages.sh gpu|cpu16|extrapolate|workers|cpuref
# Exit 0: done; 77: skipped (the last line says why); anything else: failed. Results under $RT_LOGS/<stage>/.
# Stage options (environment; defaults are sized for a 16-core machine inside one ~9-minute command):
#   cpu16        CPU16_RANKS ("1 2 4 8"; those above the core count are left out)  CPU16_REPEATS (3, fewer when
#                the time is short)  CPU16_STEPS_SCALE (1)  CPU16_SET ("key=value ...", extra overrides)
#                CPU16_WORKLOADS ("logreg lenet5 mnist_cnn sparse balance")  CLICKLOG_ROWS (400000)
#                CPU16_BALANCE_RANKS ("4 8": the balance sweep's N besides its baseline)
#   extrapolate  EXTRAPOLATE_WORKLOADS (as cpu16)  EXTRAPOLATE_LINK (measure | RATE,LATENCY)
#                EXTRAPOLATE_NETNS=1: also LeNet-5 predicted vs measured on emulated hosts at 10 Gbit/s (root and
#                `ip netns` only; ~60 s more: raise EXTRAPOLATE_BUDGET_S)
#   workers      WORKERS_LIST ("1 2 4 8 12")  WORKERS_CACHE ("8": also with data.cache=true)  WORKERS_DEVICE (cuda)
#                WORKERS_STAGED ("12": again with RINGTRAIN_STAGED_UPLOAD=1, between two default runs; "" = none)
#                WORKERS_STEPS (40)  WORKERS_BATCH (128)  WORKERS_PER_CLASS (300, 6 classes)  WORKERS_SIZE (320x320)
#   cpuref       CPUREF_ROUNDS (2)  CPUREF_MODELS ("lenet5 mnist_cnn quality_cnn")  CPUREF_STEPS_SCALE (1)
#                CPUREF_PRECISIONS ("fp32 bf16": bf16 is skipped with the reason on a CPU without it)
#                TORCH_PYTHON (an interpreter that imports torch)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="${1:?usage: device-stages.sh gpu|cpu16|extrapolate|workers|cpuref}"
: "${RT_BIN:?}" "${RT_LOGS:?}" "${RT_WORK:?}" "${RT_PY:?}" "${RT_STAGE_DEADLINE:?}"
out="$RT_LOGS/$stage"
mkdir -p "$out" "$RT_WORK"
cd "$root" || exit 1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

skip() { echo "skipped: $*"; exit 77; }
left() { echo $(( RT_STAGE_DEADLINE - $(date +%s) )); }
cores() { nproc 2>/dev/null || echo 1; }

# Seconds one repeat of each cpu16 sweep takes at N = 1, 2, 4, 8 with its ceiling on a 16-core machine (7 launches
# of the per-point lengths in bench/sweeps/cpu16_weak_*.json, ~0.7 s of start-up each). The stage shares its time
# among the workloads still to run in these proportions and gives each as many repeats (up to CPU16_REPEATS) as fit.
declare -A EST_PER_REPEAT=([logreg]=8 [lenet5]=16 [mnist_cnn]=28 [sparse]=10 [balance]=26)
# balance: the MNIST CNN with sync.balance off and speed at N = 4, 8 (not a prediction target: extrapolate skips it).
workloads_default="logreg lenet5 mnist_cnn sparse balance"

# The ranks this machine can give one core each (mpirun --bind-to core refuses more).
ranks_that_fit() {  # [say]: also print which are left out
  local n kept=() c
  c="$(cores)"
  for n in ${CPU16_RANKS:-1 2 4 8}; do
    if [ "$n" -le "$c" ]; then kept+=("$n")
    elif [ "${1:-}" = say ]; then echo "N=$n left out: this machine has $c cores" >&2; fi
  done
  echo "${kept[*]}"
}

# The sweeps' mpirun_flags ("--bind-to core --map-by core": rank i on core i, where the ceiling's copy i is pinned)
# as this Open MPI takes them after bench/sweep.py's own "--oversubscribe"; some versions refuse --map-by next to
# --oversubscribe, and then the default mapping has to do. Probed once, kept in the work folder.
mpirun_flags() {
  local f="$RT_WORK/mpirun_flags" flags
  if [ ! -f "$f" ]; then
    for flags in "--bind-to core --map-by core" "--bind-to core"; do
      # shellcheck disable=SC2086
      if timeout 60 mpirun --oversubscribe $flags -np 2 true > "$RT_WORK/mpirun_probe.log" 2>&1; then
        echo "$flags" > "$f"
        break
      fi
    done
    [ -f "$f" ] || { echo "mpirun cannot bind ranks to cores here: $(tail -3 "$RT_WORK/mpirun_probe.log")" >&2; return 1; }
    [ "$(cat "$f")" = "--bind-to core --map-by core" ] || echo "mpirun refuses --map-by core here: $(cat "$f") only" >&2
  fi
  cat "$f"
}

# make-clicklog rows for the sparse sweep (once per work folder).
clicklog() {
  local d="$RT_WORK/clicklog" rows="${CLICKLOG_ROWS:-400000}"
  if [ ! -s "$d/train.svm" ] || [ "$(cat "$d/rows" 2>/dev/null)" != "$rows" ]; then
    mkdir -p "$d"
    rm -f "$d/train.svm" "$d/test.svm"  # make-clicklog writes only new files
    "$RT_BIN" make-clicklog --format libsvm --rows "$rows" --features 1048576 --seed 1 --model-seed 7 \
      --out "$d/train.svm" >&2 || return 1
    "$RT_BIN" make-clicklog --format libsvm --rows 4000 --features 1048576 --seed 2 --model-seed 7 \
      --out "$d/test.svm" >&2 || return 1
    echo "$rows" > "$d/rows"
  fi
  echo "$d"
}

# derive W DEST [derive_sweep.py options...]: the shipped cpu16 sweep of workload W with this machine's ranks,
# repeats, step scale and data paths.
derive() {
  local w="$1" dest="$2"
  shift 2
  local extra=() item d
  if [ "$w" = sparse ]; then
    d="$(clicklog)" || return 1
    extra+=(--set "data.train_file=$d/train.svm" --set "data.test_file=$d/test.svm")
  fi
  for item in ${CPU16_SET:-}; do extra+=(--set "$item"); done
  command -v taskset >/dev/null || extra+=(--no-ceiling)  # sweep.py pins the ceiling's copies with taskset
  local flags
  flags="$(mpirun_flags)" || return 1
  local ranks
  ranks="$(ranks_that_fit)"
  [ "$w" = balance ] && ranks="$(CPU16_RANKS="${CPU16_BALANCE_RANKS:-4 8}" ranks_that_fit)"
  "$RT_PY" bench/device/derive_sweep.py "bench/sweeps/cpu16_weak_$w.json" --out "$dest" --ranks "$ranks" \
    --steps-scale "${CPU16_STEPS_SCALE:-1}" --mpirun-flags "$flags" "${extra[@]}" "$@"
}

sweep() {  # sweep SPEC OUTDIR: bench/sweep.py with its console lines in OUTDIR.log
  rm -rf "$2"
  "$RT_PY" bench/sweep.py "$1" --out "$2" --bin "$RT_BIN" > "$2.log" 2>&1
  local rc=$?
  grep -E "samples/s|wrote|error" "$2.log" | tail -12
  return $rc
}

stage_gpu() {
  [ "${RT_HAS_GPU:-0}" = 1 ] || skip "no GPU visible (nvidia-smi -L failed or is missing)"
  [ "${RT_CUDA_BUILD:-0}" = 1 ] || { echo "the build has no CUDA backend (see $RT_LOGS/configure.log)"; return 1; }
  local rc=0
  if [ "${RT_GPU_TESTS:-0}" = 1 ]; then
    echo "== ctest -L gpu"
    (cd "$RT_BUILD" && ctest -L gpu --output-on-failure --timeout 150) > "$out/ctest.log" 2>&1 || rc=1
    grep -E "Test +#|tests passed|FAILED|failed" "$out/ctest.log" | head -40
  else
    echo "ctest -L gpu: not built (Catch2 v2 not found at configure time: scripts/device-deps.sh, or Catch2_DIR)" \
      | tee "$out/note"
  fi
  if [ "${BENCH:-1}" != 0 ]; then
    local data="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
    local d
    for d in "$root/build-deps/fashion-mnist" "$root/data/fashion-mnist"; do  # scripts/device-deps.sh packs the first
      [ -n "${DATA_DIR:-}" ] || [ -e "$data/train-images-idx3-ubyte.gz" ] || [ -e "$data/train-images-idx3-ubyte" ] \
        || data="$d"
    done
    echo "== benchmark (bench/gpu/gpu_bench.sh $data)"
    BUILD="$RT_BUILD" bench/gpu/gpu_bench.sh "$data" > "$out/gpu_bench.jsonl" 2> "$out/gpu_bench.err"
    tail -5 "$out/gpu_bench.err"
    grep -q '"impl": "ringtrain"' "$out/gpu_bench.jsonl" || { echo "gpu_bench.sh: no ringtrain row"; rc=1; }
  fi
  return $rc
}

stage_cpu16() {
  local ranks w rc=0 reps="${CPU16_REPEATS:-3}" ran=0 scale="${CPU16_STEPS_SCALE:-1}" todo r per rest
  ranks="$(ranks_that_fit say)"
  [ "$ranks" != "1" ] && [ -n "$ranks" ] || skip "this machine has $(cores) core(s): no N > 1 with a core per rank"
  echo "cores: $(cores); ranks: $ranks; up to $reps repeats; steps x$scale"
  lscpu > "$out/lscpu.txt" 2>&1
  lscpu -e > "$out/lscpu-e.txt" 2>&1
  mpirun --version 2>&1 | head -1
  command -v taskset >/dev/null || echo "no taskset here: the sweeps run without the ceiling" | tee "$out/note"
  todo=(${CPU16_WORKLOADS:-$workloads_default})
  while [ ${#todo[@]} -gt 0 ]; do
    w="${todo[0]}"
    todo=("${todo[@]:1}")
    [ -f "bench/sweeps/cpu16_weak_$w.json" ] || { echo "cpu16: unknown workload $w"; rc=1; continue; }
    if [ "$w" = balance ] && [ -z "$(CPU16_RANKS="${CPU16_BALANCE_RANKS:-4 8}" ranks_that_fit)" ]; then
      echo "cpu16 balance: skipped: none of N = ${CPU16_BALANCE_RANKS:-4 8} fits $(cores) cores" | tee "$out/$w.skipped"
      continue
    fi
    # per: this workload's seconds a repeat; rest: the same for it and the ones after it
    per=$(awk -v e="${EST_PER_REPEAT[$w]:-20}" -v s="$scale" 'BEGIN { printf "%d", e * (0.3 + 0.7 * s) + 1 }')
    rest=$per
    for x in "${todo[@]}"; do
      rest=$(( rest + $(awk -v e="${EST_PER_REPEAT[$x]:-20}" -v s="$scale" 'BEGIN { printf "%d", e * (0.3 + 0.7 * s) + 1 }') ))
    done
    r=$(awk -v l="$(left)" -v p="$per" -v t="$rest" -v m="$reps" \
      'BEGIN { r = int(l * p / t / p); if (r > m) r = m; if (r < 1 && l >= p) r = 1; print r }')
    if [ "$r" -lt 1 ]; then
      echo "cpu16 $w: skipped: one repeat takes about $per s, $(left) s left in the stage" | tee "$out/$w.skipped"
      continue
    fi
    echo "== cpu16 $w ($r repeat(s), about $(( r * per )) s)"
    derive "$w" "$out/$w.sweep.json" --repeats "$r" || { echo "cpu16 $w: could not derive the sweep"; rc=1; continue; }
    sweep "$out/$w.sweep.json" "$out/$w" || { echo "cpu16 $w: failed; see $out/$w.log"; rc=1; continue; }
    ran=1
  done
  [ "$rc" = 0 ] && [ "$ran" = 0 ] && skip "no workload fitted the stage's time"
  return $rc
}

netns_works() {  # prints why not, or nothing
  [ "$(id -u)" -eq 0 ] || { echo "not root"; return 1; }
  command -v ip >/dev/null || { echo "no ip command"; return 1; }
  command -v tc >/dev/null || { echo "no tc command"; return 1; }
  local e
  e="$(ip netns add rtdevprobe$$ 2>&1)" || { echo "ip netns add failed: $e"; return 1; }
  ip netns del "rtdevprobe$$" 2>/dev/null
  return 0
}

stage_extrapolate() {
  local w rows d rc=0 ran=0 r why
  for w in ${EXTRAPOLATE_WORKLOADS:-${CPU16_WORKLOADS:-$workloads_default}}; do
    [ "$w" = balance ] && continue  # the same model as mnist_cnn, two sync settings: nothing more to predict
    d="$out/$w"
    rows="$RT_LOGS/cpu16/$w/rows.json"
    if [ ! -s "$rows" ]; then
      if [ "$w" = sparse ]; then  # predict has no sparse profile: nothing to compare a fresh measurement with
        echo "extrapolate $w: skipped: no cpu16 rows to list the in-run predictions of, and ringtrain predict does not profile the sparse path"
        continue
      fi
      if [ "$(left)" -lt 25 ]; then
        echo "extrapolate $w: skipped: no cpu16 rows and $(left) s left to measure them"
        continue
      fi
      echo "== extrapolate $w: measuring (no cpu16 rows; one repeat, no ceiling)"
      mkdir -p "$d"
      derive "$w" "$d/measured.sweep.json" --repeats 1 --no-ceiling || { rc=1; continue; }
      sweep "$d/measured.sweep.json" "$d/measured" || { echo "extrapolate $w: measuring failed"; rc=1; continue; }
      rows="$d/measured/rows.json"
    fi
    if [ "$(left)" -lt 8 ]; then
      echo "extrapolate $w: skipped: $(left) s left"
      continue
    fi
    echo "== extrapolate $w (ringtrain predict, link ${EXTRAPOLATE_LINK:-measure})"
    "$RT_PY" bench/device/extrapolate.py "$rows" --out "$d" --bin "$RT_BIN" --link "${EXTRAPOLATE_LINK:-measure}" \
      > "$d.log" 2>&1
    r=$?
    cat "$d.log" | grep -vE "^\s*$" | tail -8
    case $r in
      0) ran=1 ;;
      77) ;;
      *) echo "extrapolate $w: failed (exit $r); see $d.log"; rc=1 ;;
    esac
  done
  if why="$(netns_works)"; then
    if [ "${EXTRAPOLATE_NETNS:-0}" = 1 ] && [ "$(left)" -gt 30 ]; then
      echo "== extrapolate on emulated hosts (netns, 10 Gbit/s, LeNet-5)"
      "$RT_PY" bench/device/derive_sweep.py bench/sweeps/validation_extrapolate.json --out "$out/netns.sweep.json" \
        --ranks "$(ranks_that_fit)" --rates 10gbit --configs configs/lenet5_fashion.json --syncs ring --repeats 1 \
        --set device=cpu && sweep "$out/netns.sweep.json" "$out/netns" || { echo "extrapolate netns: failed"; rc=1; }
    else
      echo "emulated hosts: possible here (root, ip netns) but not run: EXTRAPOLATE_NETNS=1 (and EXTRAPOLATE_BUDGET_S=110) adds them (~60 s)"
    fi
  else
    echo "emulated hosts: skipped: $why (the local shared-memory link is used)"
  fi
  [ "$rc" = 0 ] && [ "$ran" = 0 ] && skip "nothing to extrapolate (no dense workload measured)"
  return $rc
}

stage_workers() {
  local device="${WORKERS_DEVICE:-cuda}"
  if [ "$device" = cuda ]; then
    [ "${RT_HAS_GPU:-0}" = 1 ] || skip "no GPU visible (WORKERS_DEVICE=cpu runs the plumbing on the CPU)"
    [ "${RT_CUDA_BUILD:-0}" = 1 ] || { echo "the build has no CUDA backend"; return 1; }
  fi
  "$RT_PY" bench/device/workers.py --bin "$RT_BIN" --out "$out" --work "$RT_WORK/workers" \
    --workers "${WORKERS_LIST:-1 2 4 8 12}" --cache-workers "${WORKERS_CACHE:-8}" --device "$device" \
    --staged-workers "${WORKERS_STAGED:-12}" \
    --steps "${WORKERS_STEPS:-40}" \
    --batch "${WORKERS_BATCH:-128}" --per-class "${WORKERS_PER_CLASS:-300}" --size "${WORKERS_SIZE:-320x320}" \
    --deadline "$RT_STAGE_DEADLINE"
}

stage_cpuref() {
  [ -x "${RT_BENCH_BIN:-}" ] || { echo "no bench_throughput built (${RT_BENCH_BIN:-unset})"; return 1; }
  "$RT_PY" bench/device/cpuref.py --bench "$RT_BENCH_BIN" --out "$out" --rounds "${CPUREF_ROUNDS:-2}" \
    --models "${CPUREF_MODELS:-lenet5 mnist_cnn quality_cnn}" --steps-scale "${CPUREF_STEPS_SCALE:-1}" \
    --precisions "${CPUREF_PRECISIONS:-fp32 bf16}" \
    --deadline "$RT_STAGE_DEADLINE" 2>&1
  local r=$?
  [ $r = 77 ] && skip "no Python here imports torch (set TORCH_PYTHON)"
  return $r
}

case "$stage" in
  gpu|cpu16|extrapolate|workers|cpuref) "stage_$stage" ;;
  *) echo "device-stages.sh: unknown stage '$stage'; use gpu, cpu16, extrapolate, workers or cpuref" >&2; exit 2 ;;
esac
