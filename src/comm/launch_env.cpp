// describe_launch_environment: hostnames and local ranks from MPI, launcher variables from the environment.
#include "ringtrain/comm/launch_env.hpp"

#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

namespace {

const char* const kLauncherVariables[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NODELIST", "SLURM_CPUS_PER_TASK",
};

const char* env(const char* name) { return std::getenv(name); }

}  // namespace

LaunchEnvironment describe_launch_environment() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw Error("describe_launch_environment: MPI is not initialised (create an MpiRuntime first)");

    LaunchEnvironment le;
    MPI_Comm world = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    MPI_Query_thread(&le.thread_level);
    le.world_size = size;

    MPI_Comm local = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
    int mine[2] = {0, 1};
    MPI_Comm_rank(local, &mine[0]);
    MPI_Comm_size(local, &mine[1]);
    MPI_Comm_free(&local);

    char host[MPI_MAX_PROCESSOR_NAME + 1] = {};
    int host_len = 0;
    check_mpi(MPI_Get_processor_name(host, &host_len), "MPI_Get_processor_name");
    std::vector<char> hosts(static_cast<size_t>(size) * (MPI_MAX_PROCESSOR_NAME + 1));
    std::vector<int> placement(static_cast<size_t>(size) * 2);
    try {
        check_mpi(MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, world),
                  "MPI_Allgather");
        check_mpi(MPI_Allgather(mine, 2, MPI_INT, placement.data(), 2, MPI_INT, world), "MPI_Allgather");
    } catch (...) {
        MPI_Comm_free(&world);
        throw;
    }
    MPI_Comm_free(&world);

    std::map<std::string, int> node_of;
    for (int k = 0; k < size; ++k) {
        RankPlacement p;
        p.rank = k;
        p.hostname = std::string(&hosts[static_cast<size_t>(k) * (MPI_MAX_PROCESSOR_NAME + 1)]);
        p.local_rank = placement[2 * k];
        p.local_size = placement[2 * k + 1];
        auto [it, inserted] = node_of.emplace(p.hostname, static_cast<int>(node_of.size()));
        p.node = it->second;
        le.ranks.push_back(std::move(p));
    }
    le.node_count = static_cast<int>(node_of.size());

    for (const char* name : kLauncherVariables)
        if (const char* v = env(name)) le.variables.emplace_back(name, v);

    if (env("SLURM_STEP_ID") && env("SLURM_PROCID") && !env("OMPI_COMM_WORLD_RANK")) le.launcher = "slurm";
    else if (env("OMPI_COMM_WORLD_RANK")) le.launcher = "open-mpi";
    else if (env("PMIX_RANK")) le.launcher = "pmix";
    else if (env("PMI_RANK")) le.launcher = "pmi";
    else le.launcher = size == 1 ? "singleton" : "unknown";

    auto compare = [&](const char* name, int expected, const char* what) {
        const char* v = env(name);
        if (!v) return;
        char* end = nullptr;
        const long x = std::strtol(v, &end, 10);
        if (end == v || x != expected)
            le.notes.push_back(std::string(name) + "=" + v + " differs from the MPI " + what + " " + std::to_string(expected) +
                               " (mpirun inside a Slurm job? ringtrain uses MPI's numbering)");
    };
    compare("SLURM_PROCID", rank, "rank");
    compare("SLURM_NTASKS", size, "world size");
    compare("SLURM_LOCALID", mine[0], "local rank");
    return le;
}

}  // namespace ringtrain::comm
