// SharedSegment: one zero-filled shared-memory mapping among the ranks of one host, owned by each rank's object.
// Created by local rank 0 (shm_open + posix_fallocate, so a full /dev/shm is an error at creation rather than a
// SIGBUS later), opened by the others, and unlinked as soon as everyone has mapped it: nothing is left behind if the
// job dies. Destruction only unmaps (never collective), so unwinding after an error cannot hang.
// Used by SharedMemoryAllreduce (the ring's collectives inside a host) and by the sparse reader's peer parsing.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

namespace ringtrain::comm {

class SharedSegment {
public:
    // Collective over `node`, whose ranks must all share one host (MPI_COMM_TYPE_SHARED). Returns nullptr on every
    // rank when any rank could not create or map it; `why` then says what failed (on the ranks where it did).
    static std::unique_ptr<SharedSegment> create(MPI_Comm node, size_t bytes, std::string* why = nullptr);
    // The same over the ranks of `parent` that share this rank's host (a split of `parent`, freed before returning).
    static std::unique_ptr<SharedSegment> create_on_host(MPI_Comm parent, size_t bytes, std::string* why = nullptr);
    ~SharedSegment();
    SharedSegment(const SharedSegment&) = delete;
    SharedSegment& operator=(const SharedSegment&) = delete;

    void* base() const { return base_; }
    size_t bytes() const { return bytes_; }
    int rank() const { return rank_; }  // among the host's ranks
    int size() const { return size_; }

private:
    SharedSegment(void* base, size_t bytes, int rank, int size) : base_(base), bytes_(bytes), rank_(rank), size_(size) {}
    void* base_ = nullptr;
    size_t bytes_ = 0;
    int rank_ = 0;
    int size_ = 1;
};

}  // namespace ringtrain::comm
