#include "ringtrain/comm/world.hpp"

#include <mpi.h>

namespace ringtrain::comm {

int max_over_world(int value) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return value;
    int result = value;
    MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return result;
}

}  // namespace ringtrain::comm
