// ringtrain: one process per rank, started by mpirun or srun.
#include <cstdio>
#include <exception>

#include "ringtrain/cli/cli.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/ops/threads.hpp"

int main(int argc, char** argv) {
    // Before MPI and any thread: may start this program again with OpenBLAS's kernels for this CPU (ops/threads.hpp).
    ringtrain::ops::restart_with_openblas_kernels_for_this_cpu(argv);
    try {
        ringtrain::comm::MpiRuntime mpi(&argc, &argv);
        return ringtrain::cli::run(argc, argv, mpi.world_rank(), mpi.world_size());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
        return 1;
    }
}
