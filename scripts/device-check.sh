#!/usr/bin/env bash
# On a machine with a GPU: configure with the CUDA backend forced on (build-gpu/), build the gpu tests, run every
# test labelled gpu, and print a short table. Needs the usual build dependencies (MPI, Eigen, nlohmann_json, Catch2,
# zlib) plus nvcc, cuDNN and NCCL; cuDNN/NCCL from the pip wheels (nvidia-cudnn-*, nvidia-nccl-*) are found too.
# Usage: scripts/device-check.sh [extra cmake arguments...]    (BUILD_DIR overrides build-gpu)
# Finishes in a few minutes on an H100 (the build is the bulk of it).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
jobs="$(nproc 2>/dev/null || echo 4)"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "== devices"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "device-check: no GPU visible (nvidia-smi -L failed); run this on a GPU node" >&2
  exit 1
fi

# cuDNN / NCCL shipped as Python wheels (e.g. next to PyTorch), when the CUDA install has none.
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

t0=$(date +%s)
echo "== configure ($build)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_CUDA=ON -DRINGTRAIN_BENCH=OFF "$@" \
      > "$build.configure.log" 2>&1; then
  tail -30 "$build.configure.log"
  echo "device-check: configure failed (log: $build.configure.log)" >&2
  exit 1
fi
grep "ringtrain: CUDA backend" "$build.configure.log"
t1=$(date +%s)
echo "== build (gpu tests, -j$jobs)"
if ! cmake --build "$build" -j "$jobs" --target test_gpu_ops test_gpu_nccl > "$build.build.log" 2>&1; then
  grep -E "error|Error" "$build.build.log" | head -30
  echo "device-check: build failed (log: $build.build.log)" >&2
  exit 1
fi
t2=$(date +%s)
echo "== ctest -L gpu"
(cd "$build" && ctest -L gpu --output-on-failure --timeout 300) | tee "$build.ctest.log"
rc=${PIPESTATUS[0]}
t3=$(date +%s)

echo
echo "== summary"
printf '%-28s %s\n' "device" "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
printf '%-28s %s\n' "configure / build / test" "$((t1 - t0)) s / $((t2 - t1)) s / $((t3 - t2)) s"
for t in test_gpu_ops test_gpu_nccl_np1 test_gpu_nccl_np2; do
  line="$(grep -E "Test +#[0-9]+: $t " "$build.ctest.log" | head -1)"
  status="$(echo "$line" | grep -oE 'Passed|Failed|Skipped|Timeout|Not Run|Exception' | head -1)"
  secs="$(echo "$line" | grep -oE '[0-9.]+ sec' || true)"
  printf '%-28s %-12s %s\n' "$t" "${status:-not run}" "$secs"
done
echo "(bench_throughput has no device flag yet: no single-GPU throughput row)"
exit "$rc"
