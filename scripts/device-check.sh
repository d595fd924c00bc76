#!/usr/bin/env bash
# On a machine with a GPU: configure with the CUDA backend forced on (build-gpu/), build the trainer and the gpu
# tests, run every test labelled gpu, run the single-GPU benchmark against PyTorch eager (bench/gpu/gpu_bench.sh),
# and print a short table. Needs the usual build dependencies (MPI, Eigen, nlohmann_json, Catch2 v2, zlib) plus nvcc,
# cuDNN and NCCL; cuDNN/NCCL from the pip wheels (nvidia-cudnn-*, nvidia-nccl-*) are found too.
# Usage: scripts/device-check.sh [extra cmake arguments...]
#   BUILD_DIR   build directory (default build-gpu)
#   DATA_DIR    Fashion-MNIST IDX files for the benchmark (default /usr/share/datasets/fashion-mnist, else data/)
#   LOG_DIR     where the logs and the benchmark's JSON lines go (default: next to the build directory)
#   BENCH=0     skip the benchmark;  Catch2_DIR=...  a Catch2 v2 CMake package where the system has only v3
# Takes about 4-5 minutes on an H100/H200 with 16 cores (the build is half of it).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
logs="${LOG_DIR:-$build-logs}"
jobs="$(nproc 2>/dev/null || echo 4)"
mkdir -p "$logs"
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
catch=()
[ -n "${Catch2_DIR:-}" ] && catch=("-DCatch2_DIR=$Catch2_DIR")

t0=$(date +%s)
echo "== configure ($build)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_CUDA=ON -DRINGTRAIN_BENCH=OFF "${catch[@]}" "$@" \
      > "$logs/configure.log" 2>&1; then
  tail -30 "$logs/configure.log"
  echo "device-check: configure failed (log: $logs/configure.log)" >&2
  exit 1
fi
grep -E "ringtrain: CUDA backend|Catch2 v2 not found" "$logs/configure.log"
targets=(ringtrain)
grep -q "Catch2 v2 not found" "$logs/configure.log" || targets+=(test_gpu_ops test_gpu_nccl)
t1=$(date +%s)
echo "== build (${targets[*]}, -j$jobs)"
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" > "$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30
  echo "device-check: build failed (log: $logs/build.log)" >&2
  exit 1
fi
t2=$(date +%s)
rc=0
if [ "${#targets[@]}" -gt 1 ]; then
  echo "== ctest -L gpu"
  (cd "$build" && ctest -L gpu --output-on-failure --timeout 300) > "$logs/ctest.log" 2>&1
  rc=$?
  grep -E "Test +#|tests passed|FAILED|failed" "$logs/ctest.log" | head -40
fi
t3=$(date +%s)
if [ "${BENCH:-1}" != 0 ]; then
  data="${DATA_DIR:-/usr/share/datasets/fashion-mnist}"
  [ -e "$data/train-images-idx3-ubyte.gz" ] || [ -e "$data/train-images-idx3-ubyte" ] || data="$root/data/fashion-mnist"
  echo "== benchmark (bench/gpu/gpu_bench.sh $data)"
  BUILD="$build" "$root/bench/gpu/gpu_bench.sh" "$data" > "$logs/gpu_bench.jsonl" 2> "$logs/gpu_bench.err"
  tail -5 "$logs/gpu_bench.err"
fi
t4=$(date +%s)

echo
echo "== summary"
printf '%-28s %s\n' "device" "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
printf '%-28s %s\n' "configure / build / test / bench" "$((t1 - t0)) s / $((t2 - t1)) s / $((t3 - t2)) s / $((t4 - t3)) s"
for t in test_gpu_ops test_gpu_nccl_np1 test_gpu_nccl_np2; do
  line="$(grep -E "Test +#[0-9]+: $t " "$logs/ctest.log" 2>/dev/null | head -1)"
  status="$(echo "$line" | grep -oE 'Passed|Failed|Skipped|Timeout|Not Run|Exception' | head -1)"
  secs="$(echo "$line" | grep -oE '[0-9.]+ sec' || true)"
  printf '%-28s %-12s %s\n' "$t" "${status:-not run}" "$secs"
done
if [ -s "$logs/gpu_bench.jsonl" ]; then
  python3 - "$logs/gpu_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = {(r["model"], r["batch"]): r for r in rows if r["impl"] == "ringtrain"}
ref = {(r["model"], r["batch"]): r for r in rows if r["impl"] == "pytorch-eager"}
print(f"{'model':<12}{'batch':>6}{'ringtrain/s':>14}{'pytorch/s':>14}{'ratio':>8}  gpu busy")
for k in sorted(set(ours) | set(ref)):
    a, b = ours.get(k, {}).get("samples_per_s"), ref.get(k, {}).get("samples_per_s")
    util = ours.get(k, {}).get("gpu_percent")
    print(f"{k[0]:<12}{k[1]:>6}{a or 0:>14,.0f}{b or 0:>14,.0f}{(a / b if a and b else 0):>8.2f}  {util if util is not None else '-'}")
PY
fi
exit "$rc"
