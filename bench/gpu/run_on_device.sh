#!/usr/bin/env bash
# What the lent GPU machine should run in one go (it is lent for minutes): scripts/device-check.sh (CUDA build, the
# `gpu` tests, the single-GPU comparison with PyTorch) with its logs in $OUT (or ./gpu-results), so they come back.
# Usage: bench/gpu/run_on_device.sh DATA_DIR      (Catch2_DIR=... where the machine has only Catch2 v3)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
data="${1:?usage: run_on_device.sh DATA_DIR (Fashion-MNIST IDX files)}"
DATA_DIR="$data" LOG_DIR="${OUT:-$root/gpu-results}" "$root/scripts/device-check.sh"
