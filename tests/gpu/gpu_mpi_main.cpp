// Entry point of the gpu tests run under mpirun: every rank needs its own GPU (NCCL does not put two ranks on one
// device), so with fewer visible devices than ranks every rank prints "no CUDA device" and returns 77 (skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>

#include "ringtrain/core/cuda_device.hpp"

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int devices = ringtrain::cuda_device_count();
    int min_devices = 0;
    MPI_Allreduce(&devices, &min_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_devices < size) {
        if (rank == 0)
            std::printf("no CUDA device for every rank (%d visible, %d ranks): skipping the gpu tests\n", min_devices,
                        size);
        MPI_Finalize();
        return 77;
    }
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed ? 1 : 0;
}
