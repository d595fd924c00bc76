#!/usr/bin/env bash
# Set-up, build and the whole test suite (unit, multi-rank through mpirun, end to end) through ctest.
# Usage: scripts/test.sh [ctest arguments...]   e.g. scripts/test.sh -L e2e   or   scripts/test.sh -LE e2e
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure "$@"
