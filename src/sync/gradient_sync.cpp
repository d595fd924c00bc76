// GradientSync: the facade over BucketLayout and the reducer chosen for the path (see the header).
#include "ringtrain/sync/gradient_sync.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <unordered_set>

#include "bucket_reducer.hpp"
#include "mono_clock.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::sync {

double BucketStat::busbw_gbs(int world_size) const {
    if (calls == 0 || total_s <= 0 || world_size < 2) return 0.0;
    const double algbw = static_cast<double>(bytes) / (total_s / static_cast<double>(calls)) / 1e9;
    return algbw * 2.0 * (world_size - 1) / world_size;
}

namespace {

// Checks the parameter list and returns each gradient's size in floats.
std::vector<size_t> gradient_sizes(const std::vector<nn::Parameter*>& params) {
    std::vector<size_t> sizes;
    std::unordered_set<const nn::Parameter*> seen;
    for (size_t i = 0; i < params.size(); ++i) {
        const nn::Parameter* p = params[i];
        if (!p) throw Error("GradientSync: parameter #" + std::to_string(i) + " is null");
        if (!seen.insert(p).second) throw Error("GradientSync: parameter '" + p->name + "' is listed twice");
        if (p->grad.numel() != p->value.numel())
            throw Error("GradientSync: parameter '" + p->name + "' has a gradient of " + std::to_string(p->grad.numel()) +
                        " elements for " + std::to_string(p->value.numel()) + " values");
        sizes.push_back(static_cast<size_t>(p->grad.numel()));
    }
    return sizes;
}

}  // namespace

GradientSync::GradientSync(std::unique_ptr<comm::Communicator> comm, std::vector<nn::Parameter*> params,
                           SyncOptions options, telemetry::Timeline* timeline)
    : comm_(std::move(comm)),
      params_(std::move(params)),
      options_(options),
      timeline_(timeline),
      layout_(BucketLayout::by_size(gradient_sizes(params_), options_.fusion_bytes)),
      stats_(std::make_unique<SharedSyncStats>()) {
    if (!comm_) throw Error("GradientSync: no communicator given");
    for (size_t i = 0; i < params_.size(); ++i) index_.emplace(params_[i], i);
    stats_->reset_buckets(layout_);
    if ((comm_->size() > 1 || options_.reduce_single_rank) && !params_.empty()) {
        // The cycle-time layout is only worth having when buckets overlap backward; until it is fixed, the first step
        // runs blocking.
        relayout_pending_ = options_.cycle_time_ms > 0 && options_.overlap && options_.fusion_bytes > 0;
        choose_reducer();
        if (reducer_->on_device()) relayout_pending_ = false;  // GPU times are not host enqueue times
        if (relayout_pending_) ready_s_.assign(params_.size(), -1.0);
    }
}

GradientSync::~GradientSync() = default;

void GradientSync::choose_reducer() {
    reducer_.reset();  // the old one's thread and arena go before the new one starts
    reducer_ = sync::choose_reducer({*comm_, params_, layout_, options_, timeline_, *stats_}, relayout_pending_);
}

void GradientSync::relayout_from_first_step() {
    relayout_pending_ = false;
    const bool all_reported = std::all_of(ready_s_.begin(), ready_s_.end(), [](double t) { return t >= 0; });
    // [0] = bucket count (0: keep the size layout, rank 0 did not see every gradient reported), then tensors per bucket.
    std::vector<uint64_t> message(params_.size() + 1, 0);
    if (comm_->rank() == 0 && all_reported) {
        const BucketLayout timed = BucketLayout::by_time(gradient_sizes(params_), options_.fusion_bytes,
                                                         options_.min_bucket_bytes, options_.cycle_time_ms, ready_s_);
        const std::vector<size_t> tensors = timed.tensors_per_bucket();
        message[0] = tensors.size();
        std::copy(tensors.begin(), tensors.end(), message.begin() + 1);
    }
    comm_->broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(message)), 0);
    ready_s_.clear();
    if (message[0] > 0) {
        const size_t buckets = std::min<size_t>(message[0], params_.size());
        const std::vector<size_t> chosen(message.begin() + 1, message.begin() + 1 + static_cast<std::ptrdiff_t>(buckets));
        size_t tensors = 0;
        for (size_t n : chosen) tensors += n;
        if (tensors != params_.size() || message[0] > params_.size())
            throw Error("GradientSync: rank 0 sent a bucket layout for " + std::to_string(tensors) +
                        " gradients, this rank has " + std::to_string(params_.size()) +
                        "; the ranks do not train the same model");
        reducer_.reset();  // it holds the old layout
        layout_ = BucketLayout(gradient_sizes(params_), chosen);
        stats_->reset_buckets(layout_);
    }
    choose_reducer();
}

void GradientSync::begin_step(int64_t step) { step_ = step; }

void GradientSync::on_gradient_ready(nn::Parameter& p) {
    if (!reducer_) return;
    const auto it = index_.find(&p);
    if (it == index_.end())
        throw Error("GradientSync: gradient of '" + p.name + "' reported, but it is not a synchronised parameter");
    reducer_->gradient_ready(it->second, step_);
    if (relayout_pending_) ready_s_[it->second] = mono_s();
}

void GradientSync::synchronize() {
    const double blocked = reducer_ ? reducer_->reduce_step(step_) : 0.0;
    ++step_;
    stats_->step_done(blocked);
    if (relayout_pending_) relayout_from_first_step();
    if (!first_step_left_out_) {
        // Every layout leaves its first step out of the buckets' calls and times (connection set-up, first
        // allocations: 21 ms against a 3.6 ms mean in one review's LeNet-5 run), as the cycle-time relayout always
        // did: the run's prediction fits its link to these means.
        first_step_left_out_ = true;
        stats_->reset_buckets(layout_);
    }
}

SyncStats GradientSync::stats() const { return stats_->snapshot(); }
void GradientSync::drain() {
    // Not added to blocked_s: that is the steps' wait (per step in the summary), and a drain before an evaluation or
    // a checkpoint waits for a step that synchronize() already counted as handed over.
    if (reducer_) (void)reducer_->drain();
}
bool GradientSync::overlapping() const { return reducer_ && reducer_->overlapping(); }
bool GradientSync::on_device() const { return reducer_ && reducer_->on_device(); }
bool GradientSync::carries_vote() const { return reducer_ && reducer_->carries_vote(); }
bool GradientSync::vote_any() const { return reducer_ && reducer_->vote_any(); }

}  // namespace ringtrain::sync
