#!/usr/bin/env bash
# Everything that waits for a lent device machine (one GPU, 16 cores, minutes of time), in ONE command:
# one build, then the selected stages in order, each with its own time budget, every result under LOG_DIR.
#   gpu          CUDA build's `ctest -L gpu` and the single-GPU benchmark against PyTorch (bench/gpu/gpu_bench.sh)
#   cpu16        CPU weak scaling at N = 1, 2, 4, 8, one core a rank, with the ceiling (N independent copies pinned
#                likewise): logistic regression, LeNet-5, the MNIST CNN, sparse logistic regression; then the MNIST
#                CNN with sync.balance off and speed at N = 4, 8 (bench/sweeps/cpu16_weak_*.json through
#                bench/sweep.py; issue 15)
#   extrapolate  `ringtrain predict` from one rank's profile and a link measured with --measure between two local
#                ranks, predicting the cpu16 points, against them (bench/device/extrapolate.py; issue 15)
#   workers      AlexNet 224x224 from a generated JPEG folder with data.workers 1, 2, 4, 8, 12: samples/s, the wait for
#                data, the GPU's utilisation (bench/device/workers.py; issue 17)
#   cpuref       LeNet-5, the MNIST CNN and the quality CNN against PyTorch on this CPU, one thread each, the
#                reference printing torch.__config__.show() (bench/device/cpuref.py; issue 17)
# A stage whose prerequisite is missing (no GPU, no torch) says why and is skipped; a failing stage does not stop the
# others; a stage that does not fit the time left is skipped with the reason. Exit 1 when the build or any stage
# failed, else 0. LOG_DIR gets summary.md (also printed at the end), results.json (every stage's rows), stages.jsonl,
# one log per stage and a folder per stage; data sets go to WORK_DIR, never to LOG_DIR.
#
# Usage: LOG_DIR=$OUT scripts/device-check.sh [extra cmake arguments...]
#   STAGES        stages to run, in this order (default "gpu cpu16 extrapolate workers cpuref")
#   TIME_BUDGET_S the whole command, build included (default 550: a device command may run 600 s)
#   BUILD_BUDGET_S, GPU_BUDGET_S, CPU16_BUDGET_S, EXTRAPOLATE_BUDGET_S, WORKERS_BUDGET_S, CPUREF_BUDGET_S
#                 each one's most seconds (defaults 330, 150, 270, 50, 70, 80); each stage also leaves the least
#                 the later stages need (20-60 s each)
#   BUILD_DIR     build directory (default build-gpu with a GPU, else build-cpu); SKIP_BUILD=1 uses it as it is
#   WORK_DIR      scratch for generated data (default /tmp/ringtrain-device-check)
#   DATA_DIR      Fashion-MNIST IDX files for the GPU benchmark (default /usr/share/datasets/fashion-mnist, else
#                 build-deps/fashion-mnist, else data/fashion-mnist; synthetic data of the same shape where none is)
#   BENCH=0       gpu stage without the benchmark
#   Catch2_DIR    a Catch2 v2 CMake package where the system has only v3 (default: build-deps/catch2-v2 when there)
# Before lending the machine the tree: scripts/device-deps.sh packs Catch2 v2, Fashion-MNIST, TurboJPEG and oneDNN
# into build-deps/ (git-ignored: carry it); each is used only where the image lacks it.
#   stage options: see scripts/device-stages.sh (CPU16_RANKS, CPU16_REPEATS, CPU16_STEPS_SCALE, WORKERS_LIST, ...)
# Expected on a 16-core H200 machine (2026-11-27: build 117 s, gpu 50 s, cpu16 214 s before the balance sweep,
# extrapolate 6 s, workers 26 s, cpuref 72 s): about 9 minutes in all, so some stages get fewer repeats.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
t_start=$(date +%s)
stages="${STAGES:-gpu cpu16 extrapolate workers cpuref}"
for s in $stages; do
  case "$s" in gpu|cpu16|extrapolate|workers|cpuref) ;;
    *) echo "device-check: STAGES: unknown stage '$s'; use gpu, cpu16, extrapolate, workers, cpuref" >&2; exit 2 ;;
  esac
done
deadline=$(( t_start + ${TIME_BUDGET_S:-550} ))
declare -A budget=([gpu]="${GPU_BUDGET_S:-150}" [cpu16]="${CPU16_BUDGET_S:-270}"
                   [extrapolate]="${EXTRAPOLATE_BUDGET_S:-50}" [workers]="${WORKERS_BUDGET_S:-70}"
                   [cpuref]="${CPUREF_BUDGET_S:-80}")
declare -A least=([gpu]=60 [cpu16]=40 [extrapolate]=20 [workers]=30 [cpuref]=30)  # not worth starting below
has() { [[ " $stages " == *" $1 "* ]]; }
logs="${LOG_DIR:-$root/device-check-logs}"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd)"
work="${WORK_DIR:-/tmp/ringtrain-device-check}"
mkdir -p "$work"
jobs="$(nproc 2>/dev/null || echo 4)"
: > "$logs/stages.jsonl"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=/usr/bin/python3
[ -x "$py" ] || py="$(command -v python3)"

record() {  # record STAGE STATUS SECONDS WHY
  "$py" -c 'import json, sys; print(json.dumps({"stage": sys.argv[1], "status": sys.argv[2], "seconds": int(sys.argv[3]), "why": sys.argv[4]}))' \
    "$1" "$2" "$3" "$4" >> "$logs/stages.jsonl"
}

echo "== machine"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); $jobs logical CPUs;" \
       "threads per core: $(lscpu 2>/dev/null | awk -F: '/Thread\(s\) per core/ {gsub(/ /, "", $2); print $2}')"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo ' (+ local changes)')"
} | tee "$logs/machine.txt"
has_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L > "$logs/nvidia-smi.txt" 2>&1; then
  has_gpu=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 | sed 's/^/gpu: /' \
    | tee -a "$logs/machine.txt"
else
  echo "gpu: none visible (nvidia-smi -L failed or is missing): gpu and workers are skipped" | tee -a "$logs/machine.txt"
fi
want_cuda=0
[ "$has_gpu" = 1 ] && { has gpu || has workers; } && want_cuda=1
build="${BUILD_DIR:-$root/$([ "$want_cuda" = 1 ] && echo build-gpu || echo build-cpu)}"

# ---- build: ringtrain, the gpu tests (gpu stage), bench_throughput (cpuref) ----
# configure_and_build DIR CUDA(ON|OFF) LIMIT_S [cmake args]: 0 ok; sets gpu_tests
gpu_tests=0
configure_and_build() {
  local dir="$1" cuda="$2" limit="$3"
  shift 3
  local catch=() targets=(ringtrain) t
  local packed="$root/build-deps/catch2-v2/lib/cmake/Catch2"  # scripts/device-deps.sh
  [ -z "${Catch2_DIR:-}" ] && [ -f "$packed/Catch2Config.cmake" ] && Catch2_DIR="$packed"
  [ -n "${Catch2_DIR:-}" ] && catch=("-DCatch2_DIR=$Catch2_DIR")
  local dn="$root/build-deps/onednn.tar.xz" dnp="$work/onednn"  # scripts/device-deps.sh; only without a system one
  if [ ! -e /usr/lib/x86_64-linux-gnu/cmake/dnnl/dnnl-config.cmake ] && [ -f "$dn" ]; then
    [ -d "$dnp" ] || tar -C "$work" -xJf "$dn"
    if [ -d "$dnp" ]; then
      catch+=("-Ddnnl_DIR=$dnp/lib/x86_64-linux-gnu/cmake/dnnl" "-DOpenCL_INCLUDE_DIR=$dnp/include"
              "-DOpenCL_LIBRARY=$dnp/lib/x86_64-linux-gnu/libOpenCL.so")
      # The binaries' RUNPATH finds libdnnl, but not libdnnl's own libOpenCL.so.1, which the image may lack.
      export LD_LIBRARY_PATH="$dnp/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
  local tj="$root/build-deps/turbojpeg"  # scripts/device-deps.sh, used only where the system has no turbojpeg.h
  [ ! -e /usr/include/turbojpeg.h ] && [ -f "$tj/include/turbojpeg.h" ] \
    && catch+=("-DTURBOJPEG_INCLUDE_DIR=$tj/include" "-DTURBOJPEG_LIBRARY=$tj/lib/libturbojpeg.so")
  local bench=OFF
  has cpuref && bench=ON
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== configure ($dir, CUDA $cuda)"
    if ! timeout "$limit" cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_CUDA="$cuda" \
          -DRINGTRAIN_BENCH="$bench" "${catch[@]}" "$@" > "$logs/configure.log" 2>&1; then
      tail -30 "$logs/configure.log"
      echo "device-check: configure failed (log: configure.log)"
      return 1
    fi
    grep -E "ringtrain: CUDA backend|ringtrain: CPU convolutions|Catch2 v2 not found" "$logs/configure.log"
  fi
  if [ "$cuda" = ON ] && has gpu; then  # every test executable of the gpu label (tests/gpu/)
    for t in $(cmake --build "$dir" --target help 2>/dev/null | grep -oE 'test_gpu[A-Za-z0-9_]*' | sort -u); do
      targets+=("$t")
      gpu_tests=1
    done
  fi
  has cpuref && targets+=(bench_throughput)
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "== build (${targets[*]}, -j$jobs)"
    local left=$(( limit - ($(date +%s) - t_build) ))
    [ "$left" -gt 10 ] || left=10
    if ! timeout "$left" cmake --build "$dir" -j "$jobs" --target "${targets[@]}" > "$logs/build.log" 2>&1; then
      grep -E "error|Error" "$logs/build.log" | head -30
      echo "device-check: build failed or ran past $limit s (log: build.log)"
      [ "${#targets[@]}" -gt 1 ] || return 1
      # One broken target (a test, a benchmark) need not cost the stages that use only the trainer.
      left=$(( limit - ($(date +%s) - t_build) ))
      [ "$left" -gt 10 ] || return 1
      echo "== build (ringtrain alone)"
      timeout "$left" cmake --build "$dir" -j "$jobs" --target ringtrain > "$logs/build-ringtrain.log" 2>&1 || return 1
      return 3
    fi
  fi
  [ -x "$dir/ringtrain" ]
}

# cuDNN / NCCL shipped as Python wheels (e.g. next to PyTorch), when the CUDA install has none.
if [ "$want_cuda" = 1 ]; then
  py_pkg_dir() { python3 -c "import importlib, os; m = importlib.import_module('$1'); print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" 2>/dev/null; }
  if [ -z "${CUDNN_ROOT:-}" ] && [ ! -e "${CUDA_HOME:-/usr/local/cuda}/include/cudnn.h" ]; then
    d="$(py_pkg_dir nvidia.cudnn)" && [ -n "$d" ] && export CUDNN_ROOT="$d" && echo "cuDNN from $d"
  fi
  if [ -z "${NCCL_ROOT:-}" ] && [ ! -e "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" ]; then
    d="$(py_pkg_dir nvidia.nccl)" && [ -n "$d" ] && export NCCL_ROOT="$d" && echo "NCCL from $d"
  fi
  for v in CUDNN_ROOT NCCL_ROOT; do
    [ -n "${!v:-}" ] && export LD_LIBRARY_PATH="${!v}/lib:${LD_LIBRARY_PATH:-}"
  done
fi

t_build=$(date +%s)
build_limit="${BUILD_BUDGET_S:-330}"
cuda_build=0
status=0
configure_and_build "$build" "$([ "$want_cuda" = 1 ] && echo ON || echo OFF)" "$build_limit" "$@"
brc=$?
if [ "$brc" = 0 ] || [ "$brc" = 3 ]; then
  cuda_build="$want_cuda"
  if [ "$brc" = 0 ]; then
    record build ok $(( $(date +%s) - t_build )) "$build (CUDA $([ "$want_cuda" = 1 ] && echo on || echo off))"
  else
    record build failed $(( $(date +%s) - t_build )) "some targets failed (build.log); ringtrain built alone"
    status=1
  fi
elif [ "$want_cuda" = 1 ] && [ $(( deadline - $(date +%s) )) -gt 240 ]; then
  # The CPU stages need no CUDA: a CPU-only build still serves them.
  record build failed $(( $(date +%s) - t_build )) "CUDA build failed (build-cuda.log); gpu and workers cannot run"
  status=1
  build="$root/build-cpu"
  cp "$logs/configure.log" "$logs/configure-cuda.log" 2>/dev/null
  cp "$logs/build.log" "$logs/build-cuda.log" 2>/dev/null
  t_build=$(date +%s)
  gpu_tests=0
  configure_and_build "$build" OFF "$build_limit" "$@"
  brc=$?
  if [ "$brc" = 0 ] || [ "$brc" = 3 ]; then
    record build-cpu "$([ "$brc" = 0 ] && echo ok || echo failed)" $(( $(date +%s) - t_build )) \
      "$build (CPU only, after the CUDA build failed)$([ "$brc" = 3 ] && echo '; some targets failed')"
  else
    record build-cpu failed $(( $(date +%s) - t_build )) "CPU build failed too (build.log)"
    build=""
  fi
else
  record build failed $(( $(date +%s) - t_build )) "see configure.log / build.log"
  status=1
  build=""
fi

export RT_BIN="${build:+$build/ringtrain}" RT_BENCH_BIN="${build:+$build/bench/throughput/bench_throughput}"
export RT_LOGS="$logs" RT_WORK="$work" RT_PY="$py" RT_HAS_GPU="$has_gpu" RT_CUDA_BUILD="$cuda_build" RT_BUILD="$build"
export RT_GPU_TESTS="$gpu_tests"

# ---- stages ----
# What a stage lacks before it could start (printed, and the stage is skipped without taking time from the others).
missing() {
  case "$1" in
    gpu) [ "$has_gpu" = 1 ] || echo "no GPU visible (nvidia-smi -L failed or is missing)" ;;
    workers) [ "$has_gpu" = 1 ] || [ "${WORKERS_DEVICE:-cuda}" != cuda ] \
               || echo "no GPU visible (WORKERS_DEVICE=cpu runs the plumbing on the CPU)" ;;
  esac
  [ -n "$build" ] || echo "no build (the build failed)"
}
runnable=()
for s in $stages; do [ -z "$(missing "$s")" ] && runnable+=("$s"); done
for s in $stages; do
  echo
  why="$(missing "$s" | head -1)"
  if [ -n "$why" ]; then
    echo "== $s: skipped: $why"
    record "$s" skipped 0 "$why"
    continue
  fi
  if [ "$s" = gpu ] || { [ "$s" = workers ] && [ "${WORKERS_DEVICE:-cuda}" = cuda ]; }; then
    if [ "$cuda_build" != 1 ]; then
      echo "== $s: failed: the CUDA build failed (build-cuda.log)"
      record "$s" failed 0 "the CUDA build failed (build-cuda.log)"
      continue
    fi
  fi
  reserve=0 after=0
  for later in "${runnable[@]}"; do  # the least each runnable stage after this one needs
    [ "$after" = 1 ] && reserve=$(( reserve + least[$later] ))
    [ "$later" = "$s" ] && after=1
  done
  now=$(date +%s)
  limit=$(( deadline - now - reserve ))
  [ "$limit" -gt "${budget[$s]}" ] && limit="${budget[$s]}"
  if [ "$limit" -lt "${least[$s]}" ]; then
    why="not enough time left: $limit s for it (the whole command has $(( deadline - now )) s, the later stages need $reserve s); it needs at least ${least[$s]} s"
    echo "== $s: skipped: $why"
    record "$s" skipped 0 "$why"
    continue
  fi
  echo "== $s (at most $limit s)"
  t0=$(date +%s)
  RT_STAGE_DEADLINE=$(( t0 + limit - 5 )) timeout -k 10 "$limit" "$root/scripts/device-stages.sh" "$s" \
    > "$logs/$s.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  grep -vE '^\s*$' "$logs/$s.log" | tail -25
  case $rc in
    0) record "$s" ok "$secs" "$(cat "$logs/$s/note" 2>/dev/null)" ;;  # what it could not do, if anything
    77) record "$s" skipped "$secs" "$(grep -E '^skipped: ' "$logs/$s.log" | tail -1 | sed 's/^skipped: //')" ;;
    124|137) record "$s" failed "$secs" "ran past its $limit s and was stopped"; status=1 ;;
    *) record "$s" failed "$secs" "exit $rc; see $s.log"; status=1 ;;
  esac
done

echo
"$py" "$root/bench/device/summary.py" "$logs" --total-s $(( $(date +%s) - t_start )) || status=1
exit "$status"
