// The reducers behind GradientSync: one per path, behind one interface, chosen once (choose_reducer), in the manner
// of Horovod's OperationManager and collective_operations.h. Private to the sync layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/nn/layer.hpp"
#include "ringtrain/sync/bucket_layout.hpp"
#include "ringtrain/sync/stall_inspector.hpp"
#include "ringtrain/sync/sync_options.hpp"

namespace ringtrain::telemetry {
class Timeline;
}

namespace ringtrain::sync {

// SyncStats written by the reducer (from its communication thread, where it has one) and read by anyone.
class SharedSyncStats {
public:
    // Restarts the per-bucket counts for `layout` (the step totals go on), and starts a new generation.
    void reset_buckets(const BucketLayout& layout);
    // One more allreduce of bucket b; returns the generation it counts in.
    uint64_t collective_issued(size_t b);
    // Its duration, when known. The device path learns it a step later, possibly after a reset: a time whose
    // collective was issued in an earlier generation (the left-out first step's) is dropped, so calls and times
    // stay the same collectives.
    void collective_time(size_t b, double s, uint64_t issued_in);
    void step_done(double blocked_s);
    SyncStats snapshot() const;

private:
    mutable std::mutex mutex_;
    SyncStats stats_;
    uint64_t generation_ = 0;
};

// What every reducer works with; all of it outlives the reducer (GradientSync owns it).
struct ReducerContext {
    comm::Communicator& comm;
    const std::vector<nn::Parameter*>& params;
    const BucketLayout& layout;
    const SyncOptions& options;
    telemetry::Timeline* timeline;  // may be null or disabled
    SharedSyncStats& stats;
};

// Averages a step's gradients over the ranks. Every rank issues the same collectives in the same order whatever
// order (and whichever subset) of gradients is reported: reporting is an optimisation, never needed for correctness.
// Sparse gradients (rows gathered instead of averaged) are meant to be one more implementation.
class BucketReducer {
public:
    virtual ~BucketReducer() = default;
    // Parameter `param`'s gradient is final for `step` (from backward). Throws Error when reported twice in a step.
    virtual void gradient_ready(size_t param, int64_t step) = 0;
    // Collective: when it returns, every gradient holds its average (or, on the device path, will hold it in stream
    // order). Rethrows a communication error. Returns the host time spent waiting for communication.
    virtual double reduce_step(int64_t step) = 0;
    // Waits for every collective still running, watched for stalls as reduce_step's waits are; returns the time
    // blocked. The device path runs a step behind the host, so a host read of device data (the loss, an evaluation,
    // a checkpoint, synchronised BatchNorm's statistics) would otherwise wait for them unwatched. Between steps.
    virtual double drain() { return 0; }
    // True when collectives run while backward goes on.
    virtual bool overlapping() const = 0;
    // True when the gradients never leave the GPU.
    virtual bool on_device() const = 0;
    // True when SyncOptions::vote rides in this path's last bucket; then vote_any() is the outcome of the last
    // reduce_step (any rank's vote nonzero).
    virtual bool carries_vote() const { return false; }
    virtual bool vote_any() const { return false; }
};

// The shared copy-in / copy-out of fusion buckets (Horovod's MemcpyInFusionBuffer / MemcpyOutFusionBuffer): each
// gradient has a slot in one arena (host or device memory, allocated once); a bucket is filled when every gradient of
// it is in. Spans: "pack" (a reported gradient, or a bucket's missing ones), "unpack".
class ArenaReducer : public BucketReducer {
public:
    void gradient_ready(size_t param, int64_t step) final;
    bool carries_vote() const final { return ctx_.options.vote != nullptr && device_ == Device::CPU; }
    bool vote_any() const final { return vote_any_; }

protected:
    ArenaReducer(const ReducerContext& ctx, Device arena_device);
    // Bucket b's gradients are all in the arena for `step` (on the caller's thread, buckets in any order).
    virtual void bucket_filled(size_t b, int64_t step) = 0;
    // Copies in what was not reported of bucket b, then calls bucket_filled (nothing when it is filled already).
    void fill(size_t b, int64_t step);
    bool filled(size_t b) const { return remaining_[b] == 0; }
    void unpack(size_t b);
    // Ready for the next step.
    void end_step();
    float* bucket_data(size_t b) { return arena_.get() + ctx_.layout.bucket(b).offset; }
    // Floats to reduce for bucket b: its gradients, and for the last bucket the vote slot behind them when carried.
    size_t reduce_count(size_t b) const;

    ReducerContext ctx_;

private:
    void hand_over(size_t b, int64_t step);  // the vote into its slot (last bucket), then bucket_filled

    Device device_;
    // SyncOptions::vote rides in one float after the last bucket (host arenas: the device path does not carry it).
    bool vote_any_ = false;
    std::shared_ptr<float> arena_;
    std::vector<uint8_t> arrived_;   // per parameter, this step
    std::vector<size_t> remaining_;  // per bucket: gradients still to arrive this step
};

// The host paths' allreduce of one bucket: watched by a StallWatchdog, drawn as "allreduce bucket <b>", counted in
// the stats.
class HostBucketAllreduce {
public:
    explicit HostBucketAllreduce(const ReducerContext& ctx);
    // Averages `count` floats at `data`: bucket b's gradients (and the vote slot, ArenaReducer::reduce_count).
    void run(size_t b, int64_t step, float* data, size_t count);

private:
    ReducerContext ctx_;
    StallWatchdog watchdog_;
};

// Each returns its reducer when its path applies to `ctx`, else null.
std::unique_ptr<BucketReducer> make_nccl_stream_reducer(const ReducerContext& ctx);
std::unique_ptr<BucketReducer> make_overlapped_host_reducer(const ReducerContext& ctx);
std::unique_ptr<BucketReducer> make_blocking_host_reducer(const ReducerContext& ctx);

// The first path that applies, in that order. `blocking` (the first step of a cycle-time layout) leaves out the
// overlapped host path.
std::unique_ptr<BucketReducer> choose_reducer(const ReducerContext& ctx, bool blocking);

}  // namespace ringtrain::sync
