// ringtrain: one process per rank, started by mpirun or srun.
#include <cstdio>
#include <exception>

#include "ringtrain/cli/cli.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"

int main(int argc, char** argv) {
    try {
        ringtrain::comm::MpiRuntime mpi(&argc, &argv);
        return ringtrain::cli::run(argc, argv, mpi.world_rank(), mpi.world_size());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ringtrain: error: %s\n", e.what());
        return 1;
    }
}
