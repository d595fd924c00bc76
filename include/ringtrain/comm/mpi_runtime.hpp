// MpiRuntime: RAII ownership of MPI_Init_thread / MPI_Finalize for the whole process (the launch environment).
// Created once in main; collectives may be called from a communication thread (MPI_THREAD_MULTIPLE requested).
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

private:
    int rank_ = 0;
    int size_ = 1;
    int thread_level_ = 0;
    bool owns_ = false;
};

}  // namespace ringtrain::comm
