// GradientSync: averages every parameter gradient across ranks after backward, Horovod style. A thin facade over
//   - a BucketLayout (which gradients travel together: fusion buckets in backward order),
//   - one reducer, chosen once for the path that applies (src/sync/bucket_reducer.hpp): the NCCL stream for GPU
//     gradients on an NCCL communicator, a communication thread that overlaps backward, or blocking on the caller's
//     thread; each watched by a StallInspector,
//   - the cycle-time relayout: with cycle_time_ms > 0 and overlap on (host paths), the first step runs blocking while
//     every rank notes when each gradient became ready; then rank 0's times decide the final layout
//     (BucketLayout::by_time), broadcast to all, so it is the same on every rank. It never changes after that.
// One step: begin_step(s) (optional: names the step in stall messages and the timeline), on_gradient_ready(p) from
// backward for each gradient (an optimisation: what is not reported, synchronize() packs itself), synchronize().
// A world of size 1 skips all of it (unless reduce_single_rank asks for the collectives anyway).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/sync/bucket_layout.hpp"
#include "ringtrain/sync/parameter_averager.hpp"  // the trainer still includes it through this header
#include "ringtrain/sync/sync_options.hpp"

namespace ringtrain::telemetry {
class Timeline;
}

namespace ringtrain::sync {

class BucketReducer;
class SharedSyncStats;

class GradientSync {
public:
    // `comm` is dedicated to this object: made by the caller, collectively, with comm::make_communicator on every rank
    // at the same point; the communication thread (if any) is its only user, so the caller's own communicator stays
    // free for its thread (MPI_THREAD_MULTIPLE; without it, overlap is off and rank 0 says so once).
    // `timeline` (optional, may be null or disabled) receives the spans "pack", "allreduce bucket <b>" (host paths),
    // "unpack" and "wait". Throws Error for a null, duplicated or gradient-less parameter.
    GradientSync(std::unique_ptr<comm::Communicator> comm, std::vector<nn::Parameter*> params, SyncOptions options,
                 telemetry::Timeline* timeline = nullptr);
    ~GradientSync();
    GradientSync(const GradientSync&) = delete;
    GradientSync& operator=(const GradientSync&) = delete;

    void begin_step(int64_t step);
    // Called by backward as each gradient becomes final (last layer first). Reporting a parameter twice in one step,
    // or one not in the list, is an Error.
    void on_gradient_ready(nn::Parameter& p);
    // Replaces every gradient with its average over all ranks. Collective (every rank must call it each step).
    // Rethrows an error of the communication thread.
    void synchronize();

    SyncStats stats() const;
    // Waits, watched for stalls (warning and abort), for every gradient collective still running: the device path
    // runs one step behind the host. Call it before the host reads device data that waits for them (the loss,
    // evaluation, checkpoints, synchronised BatchNorm); the host paths have none left between steps. Collective in
    // effect (it waits for the other ranks' part of those collectives); between steps.
    void drain();
    const SyncOptions& options() const { return options_; }
    // True when buckets really are reduced while backward goes on (a communication thread, or the NCCL stream).
    bool overlapping() const;
    // True when the device path (NCCL stream, device arena) is in use.
    bool on_device() const;
    // SyncOptions::vote: carried when a host path reduces (more than one rank, something to reduce); then
    // vote_any() says whether any rank's vote was nonzero in the last synchronize(). Otherwise the caller agrees
    // some other way (one rank: its own flag; the device path: a collective of its own).
    bool carries_vote() const;
    bool vote_any() const;
    // Sets (or, with null, clears) SyncOptions::vote. Between steps only, on every rank at the same step.
    void set_vote(const std::atomic<int>* vote) { options_.vote = vote; }
    // The communicator the collectives run on (for its byte counters: bytes_sent()/bytes_received()).
    comm::Communicator& communicator() { return *comm_; }
    const comm::Communicator& communicator() const { return *comm_; }

    // Bucket layout, for tests and logs: bucket b holds these parameter indices (into the constructor's list), in
    // order, packed contiguously.
    size_t bucket_count() const { return layout_.size(); }
    std::vector<size_t> bucket_params(size_t b) const { return layout_.params(b); }

private:
    void relayout_from_first_step();  // collective
    void choose_reducer();

    std::unique_ptr<comm::Communicator> comm_;
    std::vector<nn::Parameter*> params_;
    std::unordered_map<const nn::Parameter*, size_t> index_;
    SyncOptions options_;
    telemetry::Timeline* timeline_ = nullptr;
    BucketLayout layout_;
    std::unique_ptr<SharedSyncStats> stats_;
    std::unique_ptr<BucketReducer> reducer_;  // null: nothing to reduce (one rank, no parameters)
    bool relayout_pending_ = false;           // first step of a cycle-time layout
    bool first_step_left_out_ = false;        // the buckets' stats restart after the first step
    std::vector<double> ready_s_;             // then: when each gradient was reported (< 0: not reported)
    int64_t step_ = 0;
};

}  // namespace ringtrain::sync
