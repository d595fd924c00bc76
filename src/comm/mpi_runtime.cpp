// MpiRuntime and the MPI error check.
#include "ringtrain/comm/mpi_runtime.hpp"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

bool started_by_a_launcher() {
    // Open MPI's mpirun/prterun, any PMIx server (srun --mpi=pmix), PMI-1/2 (MPICH's Hydra, srun --mpi=pmi2), or a
    // Slurm job step. A batch script's own shell has SLURM_JOB_ID but no SLURM_STEP_ID: a process it starts without
    // srun is a singleton.
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD", "SLURM_STEP_ID"})
        if (std::getenv(name)) return true;
    return false;
}

void prefer_fast_singleton_start() {
    if (started_by_a_launcher()) return;
    // A process started without a launcher is a world of one that never spawns: Open MPI 4.1 would still fork a
    // daemon for it and probe UCX devices, 0.6 s of every `ringtrain` command (help, info, a bad config). Isolated
    // with ob1 it starts in ~0.1 s (bench/RESULTS.md, "Session of 2026-11-28, 07:18"). The variables only set
    // defaults: a user's own OMPI_MCA_* values win, and other MPI implementations ignore them.
    setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    setenv("OMPI_MCA_pml", "ob1", 0);
}

void check_mpi(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    throw Error(std::string(call) + " failed: " + (len > 0 ? std::string(text, len) : "MPI error code " + std::to_string(rc)));
}

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
        case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
        case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
        case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
        default: return "unknown";
    }
}

int mpi_thread_level() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return -1;
    int level = -1;
    MPI_Query_thread(&level);
    return level;
}

bool mpi_thread_multiple() { return mpi_thread_level() >= MPI_THREAD_MULTIPLE; }

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) throw Error("MpiRuntime: MPI was already finalized in this process; it cannot be restarted");
        MPI_Query_thread(&thread_level_);
        owns_ = false;
    } else {
        prefer_fast_singleton_start();
        const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
        if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread failed (code " + std::to_string(rc) + "); is the MPI installation working?");
        owns_ = true;
    }
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

MpiRuntime::~MpiRuntime() {
    if (!owns_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

bool MpiRuntime::thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

}  // namespace ringtrain::comm
