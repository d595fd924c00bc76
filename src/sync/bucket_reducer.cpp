// The reducers' shared parts: stats, the arena's copy-in / copy-out, the host allreduce of a bucket, and the one
// place a path is chosen.
#include "bucket_reducer.hpp"

#include <algorithm>
#include <string>

#include "mono_clock.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/telemetry/timeline.hpp"

namespace ringtrain::sync {

void SharedSyncStats::reset_buckets(const BucketLayout& layout) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    stats_.buckets.assign(layout.size(), BucketStat{});
    for (size_t b = 0; b < layout.size(); ++b) {
        stats_.buckets[b].bytes = layout.bucket(b).count * sizeof(float);
        stats_.buckets[b].tensors = layout.bucket(b).slots.size();
    }
}

uint64_t SharedSyncStats::collective_issued(size_t b) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.collectives += 1;
    stats_.buckets[b].calls += 1;
    return generation_;
}

void SharedSyncStats::collective_time(size_t b, double s, uint64_t issued_in) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (issued_in == generation_) stats_.buckets[b].total_s += s;
}

void SharedSyncStats::step_done(double blocked_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.blocked_s += blocked_s;
    ++stats_.steps;
}

SyncStats SharedSyncStats::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

// ---- ArenaReducer ----

ArenaReducer::ArenaReducer(const ReducerContext& ctx, Device arena_device)
    : ctx_(ctx),
      device_(arena_device),
      arena_(allocate_floats(ctx.layout.total_floats() + 1, arena_device)),
      arrived_(ctx.params.size(), 0),
      remaining_(ctx.layout.tensors_per_bucket()) {}

void ArenaReducer::gradient_ready(size_t param, int64_t step) {
    const nn::Parameter& p = *ctx_.params[param];
    if (arrived_[param])
        throw Error("GradientSync: gradient of '" + p.name + "' reported twice in step " + std::to_string(step) +
                    " (call synchronize() once per step)");
    const size_t b = ctx_.layout.bucket_of(param);
    const BucketSlot& slot = ctx_.layout.slot_of(param);
    {
        telemetry::Span span(ctx_.timeline, "pack", "sync");
        if (span.active()) span.set_args({{"param", p.name}, {"bucket", b}});
        copy_floats(arena_.get() + slot.offset, device_, p.grad.data(), p.grad.device(), slot.count);
    }
    arrived_[param] = 1;
    if (--remaining_[b] == 0) hand_over(b, step);
}

void ArenaReducer::fill(size_t b, int64_t step) {
    if (remaining_[b] == 0) return;
    {
        telemetry::Span span(ctx_.timeline, "pack", "sync");
        if (span.active()) span.set_args({{"bucket", b}, {"missing", remaining_[b]}});
        for (const BucketSlot& s : ctx_.layout.bucket(b).slots) {
            if (arrived_[s.param]) continue;
            const Tensor& g = ctx_.params[s.param]->grad;
            copy_floats(arena_.get() + s.offset, device_, g.data(), g.device(), s.count);
            arrived_[s.param] = 1;
        }
    }
    remaining_[b] = 0;
    hand_over(b, step);
}

// The vote is read as late as possible: when the last bucket goes, before any thread may reduce it.
void ArenaReducer::hand_over(size_t b, int64_t step) {
    if (carries_vote() && b + 1 == ctx_.layout.size())
        arena_.get()[ctx_.layout.total_floats()] = ctx_.options.vote->load(std::memory_order_relaxed) != 0 ? 1.0f : 0.0f;
    bucket_filled(b, step);
}

size_t ArenaReducer::reduce_count(size_t b) const {
    const Bucket& bucket = ctx_.layout.bucket(b);
    // Buckets are packed in order, so the slot after the last bucket is the arena's last float.
    return bucket.count + (carries_vote() && b + 1 == ctx_.layout.size() ? 1 : 0);
}

void ArenaReducer::unpack(size_t b) {
    telemetry::Span span(ctx_.timeline, "unpack", "sync");
    if (span.active()) span.set_args({{"bucket", b}});
    for (const BucketSlot& s : ctx_.layout.bucket(b).slots) {
        Tensor& g = ctx_.params[s.param]->grad;
        copy_floats(g.data(), g.device(), arena_.get() + s.offset, device_, s.count);
    }
    // The average of 0/1 votes is > 0 exactly when some rank voted (1/N survives 16-bit wire formats too).
    if (carries_vote() && b + 1 == ctx_.layout.size()) vote_any_ = arena_.get()[ctx_.layout.total_floats()] > 0.0f;
}

void ArenaReducer::end_step() {
    std::fill(arrived_.begin(), arrived_.end(), 0);
    for (size_t b = 0; b < remaining_.size(); ++b) remaining_[b] = ctx_.layout.bucket(b).slots.size();
}

// ---- HostBucketAllreduce ----

HostBucketAllreduce::HostBucketAllreduce(const ReducerContext& ctx)
    : ctx_(ctx), watchdog_(StallInspector(ctx.comm, ctx.options.stall_warning_s, ctx.options.stall_abort_s)) {}

void HostBucketAllreduce::run(size_t b, int64_t step, float* data, size_t count) {
    const Bucket& bucket = ctx_.layout.bucket(b);
    const double t0 = mono_s();
    watchdog_.started({b, bucket.count, step}, t0);
    try {
        telemetry::Timeline* tl = ctx_.timeline;
        telemetry::Span span(tl, tl && tl->enabled() ? "allreduce bucket " + std::to_string(b) : "", "sync");
        if (span.active())
            span.set_args({{"bytes", bucket.count * sizeof(float)},
                           {"tensors", bucket.slots.size()},
                           {"step", step},
                           {"wire", comm::wire_format_name(ctx_.options.wire)}});
        ctx_.comm.allreduce(std::span<float>(data, count), comm::ReduceOp::Average, ctx_.options.wire);
    } catch (...) {
        watchdog_.finished();
        throw;
    }
    const double dt = mono_s() - t0;
    watchdog_.finished();
    ctx_.stats.collective_time(b, dt, ctx_.stats.collective_issued(b));
}

// ---- the choice ----

std::unique_ptr<BucketReducer> choose_reducer(const ReducerContext& ctx, bool blocking) {
    if (auto r = make_nccl_stream_reducer(ctx)) return r;
    if (!blocking)
        if (auto r = make_overlapped_host_reducer(ctx)) return r;
    return make_blocking_host_reducer(ctx);
}

}  // namespace ringtrain::sync
