// MpiRuntime: RAII ownership of MPI_Init_thread / MPI_Finalize for the whole process (the launch environment).
// Created once in main; collectives may be called from a communication thread (MPI_THREAD_MULTIPLE requested).
// If MPI is already initialised (a test main, an embedding program), the runtime does not own it and never
// finalizes it. MPI_COMM_WORLD gets MPI_ERRORS_RETURN, so failing MPI calls become ringtrain::Error exceptions.
#pragma once

namespace ringtrain::comm {

class MpiRuntime {
public:
    MpiRuntime(int* argc, char*** argv);
    ~MpiRuntime();
    MpiRuntime(const MpiRuntime&) = delete;
    MpiRuntime& operator=(const MpiRuntime&) = delete;

    int world_rank() const { return rank_; }
    int world_size() const { return size_; }
    // The thread level MPI granted (MPI_THREAD_*).
    int thread_level() const { return thread_level_; }
    // True when the granted level is MPI_THREAD_MULTIPLE (collectives from a communication thread are safe).
    bool thread_multiple() const;
    // True when this object called MPI_Init_thread (and will call MPI_Finalize).
    bool owns_mpi() const { return owns_; }

private:
    int rank_ = 0;
    int size_ = 1;
    int thread_level_ = 0;
    bool owns_ = false;
};

// True when a launcher started this process (mpirun, srun, a PMI or PMIx server), from its environment variables.
bool started_by_a_launcher();
// Before MPI_Init in a process no launcher started: default Open MPI to an isolated singleton on the ob1 PML (no
// daemon, no UCX probe), unless the user set those MCA variables. MpiRuntime calls it.
void prefer_fast_singleton_start();

// Throws ringtrain::Error("<call> failed: <MPI_Error_string>") unless rc is MPI_SUCCESS.
// Needs MPI_ERRORS_RETURN on the communicator the call used (MpiRuntime and the communicators set it).
void check_mpi(int rc, const char* call);

// The thread level of the running MPI (MPI_Query_thread); -1 when MPI is not initialised or already finalised.
int mpi_thread_level();
// True when the running MPI grants MPI_THREAD_MULTIPLE (collectives from several threads on separate communicators).
bool mpi_thread_multiple();

// Name of an MPI_THREAD_* level ("MPI_THREAD_MULTIPLE", ...).
const char* thread_level_name(int level);

}  // namespace ringtrain::comm
