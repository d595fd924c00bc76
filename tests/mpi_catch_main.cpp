// Catch2 entry point for tests run under mpirun: MPI is initialised (with full thread support, as the trainer
// does) around the session, and each rank runs every test case; any failing rank fails the ctest entry.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const int failed = Catch::Session().run(argc, argv);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed ? 1 : 0;
}
