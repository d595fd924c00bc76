#!/usr/bin/env bash
# Everything the GPU machine should run in one go (it is lent for minutes): CUDA build, `gpu` tests, then the
# single-GPU throughput comparison with PyTorch (bench/gpu/gpu_bench.sh). Results go to $OUT (or ./gpu-results).
# Usage: bench/gpu/run_on_device.sh DATA_DIR      (RINGTRAIN_TESTS=OFF where Catch2 v2 is missing: trainer only)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/gpu-results}"
mkdir -p "$out"
data="${1:?usage: run_on_device.sh DATA_DIR (Fashion-MNIST IDX files)}"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nvidia-smi -L
# cuDNN / NCCL from Python wheels when the CUDA install has none (as scripts/device-check.sh does).
py_pkg_dir() { python3 -c "import importlib, os; m = importlib.import_module('$1'); print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" 2>/dev/null; }
if [ ! -e "${CUDA_HOME:-/usr/local/cuda}/include/cudnn.h" ]; then d="$(py_pkg_dir nvidia.cudnn)" && export CUDNN_ROOT="$d"; fi
if [ ! -e "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" ]; then d="$(py_pkg_dir nvidia.nccl)" && export NCCL_ROOT="$d"; fi
for v in CUDNN_ROOT NCCL_ROOT; do [ -n "${!v:-}" ] && export LD_LIBRARY_PATH="${!v}/lib:${LD_LIBRARY_PATH:-}"; done
build="$root/build-gpu"
t0=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_CUDA=ON -DRINGTRAIN_BENCH=OFF -DRINGTRAIN_TESTS=${RINGTRAIN_TESTS:-ON} > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
grep "ringtrain: CUDA" "$out/configure.log"
targets="ringtrain"; [ "${RINGTRAIN_TESTS:-ON}" = ON ] && targets="ringtrain test_gpu_ops test_gpu_nccl"
cmake --build "$build" -j "$(nproc)" --target $targets > "$out/build.log" 2>&1 \
  || { grep -E "error" "$out/build.log" | head -30; exit 1; }
echo "configure + build: $(( $(date +%s) - t0 )) s"
if [ "${RINGTRAIN_TESTS:-ON}" = ON ]; then
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 200) > "$out/ctest.log" 2>&1
  grep -E "Test +#|tests passed" "$out/ctest.log"
fi
BUILD="$build" "$root/bench/gpu/gpu_bench.sh" "$data" | tee "$out/gpu_bench.jsonl"
