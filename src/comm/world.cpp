#include "ringtrain/comm/world.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace ringtrain::comm {

int max_over_world(int value) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return value;
    int result = value;
    MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return result;
}

void abort_world(int exit_code) {
    std::fflush(stderr);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort should not return
}

}  // namespace ringtrain::comm
