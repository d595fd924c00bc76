// CommBatchStatsReducer: synchronised BatchNorm's cross-rank sum (nn::BatchStatsReducer) over a Communicator.
//
// Which communicator: the trainer's main one, which only the training thread uses (start-up, metrics, local SGD,
// checkpoints, stop votes) — and BatchNorm's forward and backward run on that thread too, so the two never overlap.
// The overlapped gradient sync reduces buckets on a communication thread while backward goes on, but over a
// communicator of its own (its own MPI_Comm_dup and shared-memory segment, made in TrainerParts::build_collectively),
// so a batchnorm sum in backward and a gradient bucket in flight never share a communicator. Every rank issues the
// batchnorm sums in the same order (layer order in forward, reverse in backward), so the main communicator's
// collectives stay matched.
#pragma once

#include <cstdint>
#include <span>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/batch_stats_reducer.hpp"
#include "ringtrain/sync/stall_inspector.hpp"

namespace ringtrain::sync {

class CommBatchStatsReducer : public nn::BatchStatsReducer {
public:
    // `comm` is borrowed and must be used by the calling (training) thread only while this reducer is in use; so is
    // `watchdog` (none: the sums are not watched for stalls).
    explicit CommBatchStatsReducer(comm::Communicator& comm, StallWatchdog* watchdog = nullptr)
        : comm_(comm), watchdog_(watchdog) {}
    // A blocking allreduce (Sum, double precision) on the calling thread; a no-op on one rank.
    void sum(std::span<double> values) override;
    // Collectives issued so far (for tests and telemetry).
    uint64_t collectives() const { return collectives_; }

private:
    comm::Communicator& comm_;
    StallWatchdog* watchdog_;
    uint64_t collectives_ = 0;
};

}  // namespace ringtrain::sync
