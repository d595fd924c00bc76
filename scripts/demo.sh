#!/usr/bin/env bash
# Set-up, build, then train LeNet-5 on Fashion-MNIST (Debian's dataset-fashion-mnist) with 2 ranks.
# Extra arguments are passed to `ringtrain train`, e.g. scripts/demo.sh --set train.epochs=2
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
ranks="${RANKS:-2}"
cd "$root"
# A folder per demo run: a fresh run refuses a folder that holds an earlier run (continue one with
# --set checkpoint.resume=auto --set output.dir=runs/demo-...).
out="runs/demo-$(date +%Y%m%d-%H%M%S)"
mpirun --oversubscribe --bind-to none -np "$ranks" "${BUILD_DIR:-$root/build}/ringtrain" train \
  --config configs/lenet5_fashion.json --set train.epochs=1 --set output.dir="$out" "$@"
echo "demo: summary in $out/summary.json, per-step metrics in $out/metrics.jsonl"
