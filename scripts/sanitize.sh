#!/usr/bin/env bash
# Builds the library and its unit, comm and sync tests with sanitizers and runs them: the unit tests, the fuzz
# targets, and the collectives and gradient sync at 2 ranks (the communication thread, the stall watchdog, the
# prefetch thread and the shared-memory barriers all run there), and the predictor's allreduce-beside-the-profile
# thread (test_predict).
# Usage: scripts/sanitize.sh [address|undefined|thread] [--quick] [ctest arguments...]
#   address   = ASan + UBSan (default)     thread = TSan
#   --quick   core, comm and the image path: the tensor/RNG/hash/JSON/CRC units, every collective at 2 ranks
#             (shared-memory barriers included), and the JPEG/PNG decoders and image transforms on generated, mutated
#             and truncated files, which read users' files (what CI runs: a few minutes on 2 cores instead of ~15)
# Build folder: build-sanitize-<kind>/ (CPU only: sanitizers do not see into the GPU).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kind="${1:-address}"
[ $# -gt 0 ] && shift
case "$kind" in address|undefined|thread) ;; *) echo "usage: scripts/sanitize.sh [address|undefined|thread] [ctest args...]" >&2; exit 2 ;; esac
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build="${BUILD_DIR:-$root/build-sanitize-$kind}"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRINGTRAIN_SANITIZE="$kind" -DRINGTRAIN_CUDA=OFF \
  -DRINGTRAIN_BENCH=OFF -DRINGTRAIN_NATIVE=OFF
targets=(test_core test_ops test_nn test_optim test_data test_image_decode test_image_transform test_half test_telemetry
         test_sync_parts test_comm test_sync test_predict
         fuzz_config fuzz_model fuzz_idx fuzz_checkpoint)
tests='^(test_(core|ops|nn|optim|data|image_decode|image_transform|half|telemetry|sync_parts|predict)|test_comm_np2|test_sync_np2|fuzz_.*)$'
if [ "$quick" -eq 1 ]; then
  targets=(test_core test_half test_comm test_image_decode test_image_transform)
  tests='^(test_core|test_half|test_comm_np2|test_image_decode|test_image_transform)$'
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Open MPI's own allocations live until MPI_Finalize and beyond: leak reports would be about libmpi, not us.
# An allocation over 4 GiB throws std::bad_alloc (the fuzz driver reports it with its input) instead of being granted.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:max_allocation_size_mb=4096:allocator_may_return_null=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# history_size=7: the largest per-thread history, so the earlier access of a race inside Open MPI keeps its stack
# (without it, "failed to restore the stack" and the module suppressions in tsan.supp cannot match).
export TSAN_OPTIONS="halt_on_error=1:history_size=7:second_deadlock_stack=1:max_allocation_size_mb=4096:allocator_may_return_null=1:suppressions=$root/scripts/tsan.supp:${TSAN_OPTIONS:-}"
# OpenBLAS and OpenMP threads are not instrumented: one compute thread keeps TSan's view to our own threads.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$build"
# Sanitized code runs several times slower (TSan 5-15x): tests/CMakeLists.txt raises every test's timeout 8x.
ctest --output-on-failure -R "$tests" "$@"
