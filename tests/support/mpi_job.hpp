// For tests that run in-process on every rank of an mpirun job: the rank and size, and one scratch folder for the
// whole job (rank 0 makes and fills it, every rank learns its name).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "support/run_command.hpp"

namespace rt_test {

inline int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

// temp_dir(prefix + "-npN") made on rank 0, which calls fill(dir) before the others learn the name.
template <class Fill>
std::string shared_job_dir(const std::string& prefix, Fill fill) {
    std::string dir;
    if (world_rank() == 0) {
        dir = temp_dir(prefix + "-np" + std::to_string(world_size()));
        fill(dir);
    }
    uint64_t n = dir.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    dir.resize(n);
    MPI_Bcast(dir.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    return dir;
}

}  // namespace rt_test
