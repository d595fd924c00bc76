// Launch environment: where each rank runs and which launcher started it, for `ringtrain info` and run summaries.
// Placement (host, local rank) comes from MPI itself (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), never from
// launcher variables such as SLURM_PROCID, which are wrong under mpirun inside a Slurm allocation; the variables are
// only reported, and a disagreement with MPI is pointed out in `notes`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ringtrain::comm {

struct RankPlacement {
    int rank = 0;
    std::string hostname;
    int local_rank = 0;  // index among the ranks on the same host (shared-memory node)
    int local_size = 1;
    int node = 0;        // index of the host, in order of each host's lowest rank
};

struct LaunchEnvironment {
    int world_size = 1;
    int node_count = 1;
    int thread_level = 0;  // MPI_THREAD_* granted
    // "slurm" (srun), "open-mpi" (mpirun/orterun/prterun), "pmix", "pmi" (MPICH/Intel Hydra), or "singleton".
    std::string launcher;
    // Launcher variables set on the calling rank, as (name, value), in a fixed order:
    // OMPI_COMM_WORLD_*, OMPI_UNIVERSE_SIZE, PMIX_RANK, PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, SLURM_*.
    std::vector<std::pair<std::string, std::string>> variables;
    std::vector<RankPlacement> ranks;  // every rank, in rank order
    std::vector<std::string> notes;    // e.g. "SLURM_PROCID=3 differs from the MPI rank 0 (mpirun inside a job?)"
};

// Collective over MPI_COMM_WORLD (every rank must call it); every rank gets the full table. Needs MPI initialised.
LaunchEnvironment describe_launch_environment();

// The communicator backends this build provides, in the order `sync.backend` documents them.
std::vector<std::string> communicator_backends();

}  // namespace ringtrain::comm
