// GradientSync (fusion buckets, communication thread, stall watchdog) and ParameterAverager. See the header.
// The device path (NCCL stream, device arena) is in gradient_sync_nccl.cpp.
#include "ringtrain/sync/gradient_sync.hpp"

#include "ringtrain/core/memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/telemetry/timeline.hpp"
#include "gradient_sync_detail.hpp"

namespace ringtrain::sync {

using detail::mono_s;
using detail::print_stall_warning;
using detail::stall_abort_text;

double BucketStat::busbw_gbs(int world_size) const {
    if (calls == 0 || total_s <= 0 || world_size < 2) return 0.0;
    const double algbw = static_cast<double>(bytes) / (total_s / static_cast<double>(calls)) / 1e9;
    return algbw * 2.0 * (world_size - 1) / world_size;
}

GradientSync::GradientSync(comm::Communicator& comm, std::vector<nn::Parameter*> params) : comm_(&comm) {
    options_.fusion_bytes = std::numeric_limits<size_t>::max();
    options_.overlap = false;
    init(std::move(params));
}

GradientSync::GradientSync(std::unique_ptr<comm::Communicator> comm, std::vector<nn::Parameter*> params,
                           SyncOptions options, telemetry::Timeline* timeline)
    : owned_(std::move(comm)), options_(options), timeline_(timeline) {
    if (!owned_) throw Error("GradientSync: no communicator given");
    comm_ = owned_.get();
    init(std::move(params));
}

void GradientSync::init(std::vector<nn::Parameter*> params) {
    params_ = std::move(params);
    std::unordered_set<std::string> names;
    for (size_t i = 0; i < params_.size(); ++i) {
        nn::Parameter* p = params_[i];
        if (!p) throw Error("GradientSync: parameter #" + std::to_string(i) + " is null");
        if (!index_.emplace(p, i).second) throw Error("GradientSync: parameter '" + p->name + "' is listed twice");
        if (p->grad.numel() != p->value.numel())
            throw Error("GradientSync: parameter '" + p->name + "' has a gradient of " + std::to_string(p->grad.numel()) +
                        " elements for " + std::to_string(p->value.numel()) + " values");
    }

    bucket_of_.assign(params_.size(), 0);
    arrived_.assign(params_.size(), 0);
    apply_layout(layout(false));

    active_ = (comm_->size() > 1 || options_.reduce_single_rank) && !params_.empty();
    if (!active_) return;
    if (init_device()) return;  // the NCCL stream does the work: no host arena, no threads
    size_t total = 0;
    for (const Bucket& b : buckets_) total += b.count;
    arena_.assign(total, 0.0f);

    // The cycle-time layout is only worth having when buckets overlap backward; until it is fixed, the first step
    // runs blocking (there is no thread to hand buckets to yet).
    relayout_pending_ = options_.cycle_time_ms > 0 && options_.overlap && options_.fusion_bytes > 0;
    if (relayout_pending_)
        ready_s_.assign(params_.size(), -1.0);
    else
        start_overlap_if_useful();
    if (options_.stall_warning_s > 0 || options_.stall_abort_s > 0) watchdog_ = std::thread([this] { watchdog_loop(); });
}

std::vector<size_t> GradientSync::layout(bool by_time) const {
    const double cycle_s = options_.cycle_time_ms * 1e-3;
    std::vector<size_t> layout;
    size_t bucket_bytes = 0;
    double bucket_t0 = 0;
    for (size_t k = params_.size(); k-- > 0;) {
        const size_t bytes = static_cast<size_t>(params_[k]->grad.numel()) * sizeof(float);
        const double t = by_time ? ready_s_[k] : 0.0;
        const bool in_window = t - bucket_t0 <= cycle_s || bucket_bytes < options_.min_bucket_bytes;
        const bool fits = !layout.empty() && options_.fusion_bytes > 0 && bucket_bytes + bytes <= options_.fusion_bytes &&
                          bucket_bytes + bytes >= bytes &&  // no overflow
                          (!by_time || in_window);
        if (!fits) {
            layout.push_back(0);
            bucket_bytes = 0;
            bucket_t0 = t;
        } else if (t - bucket_t0 > cycle_s) {
            bucket_t0 = t;  // joined only because the bucket was under min_bucket_bytes: a new window
        }
        ++layout.back();
        bucket_bytes += bytes;
    }
    return layout;
}

void GradientSync::apply_layout(const std::vector<size_t>& tensors_per_bucket) {
    std::lock_guard<std::mutex> lock(mutex_);
    buckets_.clear();
    size_t offset = 0;
    size_t k = params_.size();
    for (size_t n : tensors_per_bucket) {
        buckets_.emplace_back();
        Bucket& b = buckets_.back();
        b.offset = offset;
        for (size_t t = 0; t < n; ++t) {
            --k;
            const size_t count = static_cast<size_t>(params_[k]->grad.numel());
            b.slots.push_back({k, offset, count});
            b.count += count;
            offset += count;
            bucket_of_[k] = buckets_.size() - 1;
        }
        b.remaining = b.slots.size();
    }
    next_to_reduce_ = 0;
    stats_.buckets.assign(buckets_.size(), BucketStat{});
    for (size_t b = 0; b < buckets_.size(); ++b) {
        stats_.buckets[b].bytes = buckets_[b].count * sizeof(float);
        stats_.buckets[b].tensors = buckets_[b].slots.size();
    }
}

void GradientSync::relayout_from_first_step(bool all_reported) {
    relayout_pending_ = false;
    // [0] = bucket count (0: keep the size layout, rank 0 did not see every gradient reported), then tensors per bucket.
    std::vector<uint64_t> message(params_.size() + 1, 0);
    if (comm_->rank() == 0 && all_reported) {
        const std::vector<size_t> timed = layout(true);
        message[0] = timed.size();
        std::copy(timed.begin(), timed.end(), message.begin() + 1);
    }
    comm_->broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(message)), 0);
    ready_s_.clear();
    if (message[0] > 0) {
        std::vector<size_t> chosen(message.begin() + 1, message.begin() + 1 + static_cast<std::ptrdiff_t>(message[0]));
        size_t tensors = 0;
        for (size_t n : chosen) tensors += n;
        if (tensors != params_.size() || message[0] > params_.size())
            throw Error("GradientSync: rank 0 sent a bucket layout for " + std::to_string(tensors) +
                        " gradients, this rank has " + std::to_string(params_.size()) +
                        "; the ranks do not train the same model");
        apply_layout(chosen);
    }
    start_overlap_if_useful();
}

void GradientSync::start_overlap_if_useful() {
    // One bucket can only be reduced once backward is over, so a communication thread could hide nothing and
    // would only add a hand-over per step (measured: logreg at 2 ranks, ~3 % of throughput).
    overlap_ = options_.overlap && buckets_.size() > 1;
    if (overlap_ && !comm::mpi_thread_multiple()) {
        overlap_ = false;
        if (comm_->rank() == 0)
            std::fprintf(stderr,
                         "ringtrain: rank 0: warning: MPI does not provide MPI_THREAD_MULTIPLE (it gives %s); gradient "
                         "allreduces run on the training thread (sync.overlap is off)\n",
                         comm::thread_level_name(comm::mpi_thread_level()));
    }
    if (overlap_) comm_thread_ = std::thread([this] { comm_loop(); });
}

GradientSync::~GradientSync() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    watchdog_cv_.notify_all();
    if (comm_thread_.joinable()) comm_thread_.join();
    if (watchdog_.joinable()) watchdog_.join();
}

std::vector<size_t> GradientSync::bucket_params(size_t b) const {
    std::vector<size_t> out;
    for (const Slot& s : buckets_.at(b).slots) out.push_back(s.param);
    return out;
}

void GradientSync::begin_step(int64_t step) { step_ = step; }

void GradientSync::on_gradient_ready(nn::Parameter& p) {
    if (!active_) return;
    const auto it = index_.find(&p);
    if (it == index_.end())
        throw Error("GradientSync: gradient of '" + p.name + "' reported, but it is not a synchronised parameter");
    const size_t i = it->second;
    if (arrived_[i])
        throw Error("GradientSync: gradient of '" + p.name + "' reported twice in step " + std::to_string(step_) +
                    " (call synchronize() once per step)");
    const size_t bi = bucket_of_[i];
    Bucket& b = buckets_[bi];
    const auto slot = std::find_if(b.slots.begin(), b.slots.end(), [&](const Slot& s) { return s.param == i; });
    {
        telemetry::Span span(timeline_, "pack", "sync");
        if (span.active()) span.set_args(R"({"param":")" + p.name + R"(","bucket":)" + std::to_string(bi) + "}");
        copy_floats(slot_data(*slot), arena_device(), p.grad.data(), p.grad.device(), slot->count);
    }
    arrived_[i] = 1;
    if (relayout_pending_) ready_s_[i] = mono_s();
    if (dev_) {
        if (--b.remaining == 0 && overlap_) device_enqueue_complete();
        return;
    }
    if (--b.remaining == 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        hand_over_locked(bi);
    }
    if (b.remaining == 0 && overlap_) cv_.notify_all();
}

void GradientSync::hand_over_locked(size_t b) {
    buckets_[b].state = State::Queued;
    buckets_[b].step = step_;
}

void GradientSync::pack_missing(size_t bi) {
    Bucket& b = buckets_[bi];
    if (b.remaining == 0) return;
    telemetry::Span span(timeline_, "pack", "sync");
    if (span.active()) span.set_args(R"({"bucket":)" + std::to_string(bi) + R"(,"missing":)" + std::to_string(b.remaining) + "}");
    for (const Slot& s : b.slots) {
        if (arrived_[s.param]) continue;
        const Tensor& g = params_[s.param]->grad;
        copy_floats(slot_data(s), arena_device(), g.data(), g.device(), s.count);
        arrived_[s.param] = 1;
    }
    b.remaining = 0;
}

void GradientSync::reduce_bucket(size_t bi) {
    Bucket& b = buckets_[bi];
    const double t0 = mono_s();
    int64_t step;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        step = b.step;
        inflight_.active = true;
        inflight_.bucket = bi;
        inflight_.step = step;
        inflight_.start_s = t0;
        inflight_.warned = false;
    }
    try {
        telemetry::Span span(timeline_, timeline_ && timeline_->enabled() ? "allreduce bucket " + std::to_string(bi) : "",
                             "sync");
        if (span.active())
            span.set_args(R"({"bytes":)" + std::to_string(b.count * sizeof(float)) + R"(,"tensors":)" +
                          std::to_string(b.slots.size()) + R"(,"step":)" + std::to_string(step) + R"(,"wire":")" +
                          comm::wire_format_name(options_.wire) + "\"}");
        comm_->allreduce(std::span<float>(arena_.data() + b.offset, b.count), comm::ReduceOp::Average, options_.wire);
    } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        inflight_.active = false;
        throw;
    }
    const double dt = mono_s() - t0;
    std::lock_guard<std::mutex> lock(mutex_);
    inflight_.active = false;
    stats_.collectives += 1;
    stats_.buckets[bi].calls += 1;
    stats_.buckets[bi].total_s += dt;
}

void GradientSync::unpack(size_t bi) {
    const Bucket& b = buckets_[bi];
    telemetry::Span span(timeline_, "unpack", "sync");
    if (span.active()) span.set_args(R"({"bucket":)" + std::to_string(bi) + "}");
    for (const Slot& s : b.slots) {
        Tensor& g = params_[s.param]->grad;
        copy_floats(g.data(), g.device(), slot_data(s), arena_device(), s.count);
    }
}

void GradientSync::comm_loop() {
    if (timeline_) timeline_->name_thread("gradient sync");
    for (;;) {
        size_t bi;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || buckets_[next_to_reduce_].state == State::Queued; });
            if (stop_) return;
            bi = next_to_reduce_;
            buckets_[bi].state = State::Running;
        }
        try {
            reduce_bucket(bi);
        } catch (...) {
            {
                std::lock_guard<std::mutex> lock(mutex_);
                error_ = std::current_exception();
            }
            cv_.notify_all();
            return;  // the ranks' collective sequences no longer match: start nothing more
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            buckets_[bi].state = State::Done;
            next_to_reduce_ = (bi + 1) % buckets_.size();
        }
        cv_.notify_all();
    }
}

void GradientSync::synchronize() {
    if (!active_) {
        ++step_;
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.steps;
        return;
    }
    double blocked = 0;
    if (dev_) {
        blocked = device_synchronize();
    } else if (overlap_) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (error_) std::rethrow_exception(error_);
        }
        // Hand over what backward did not report, in bucket order (the comm thread reduces in that order anyway).
        for (size_t bi = 0; bi < buckets_.size(); ++bi) {
            if (buckets_[bi].remaining == 0) continue;
            pack_missing(bi);
            {
                std::lock_guard<std::mutex> lock(mutex_);
                hand_over_locked(bi);
            }
            cv_.notify_all();
        }
        for (size_t bi = 0; bi < buckets_.size(); ++bi) {
            bool waited = false;
            const double t0 = mono_s();
            const int64_t t0_us = timeline_ && timeline_->enabled() ? timeline_->now_us() : 0;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                auto ready = [&] { return buckets_[bi].state == State::Done || error_; };
                if (!ready()) {
                    waited = true;
                    cv_.wait(lock, ready);
                }
                if (error_) std::rethrow_exception(error_);
            }
            if (waited) {
                blocked += mono_s() - t0;
                if (timeline_ && timeline_->enabled())
                    timeline_->add("wait", "sync", t0_us, timeline_->now_us() - t0_us,
                                   R"({"bucket":)" + std::to_string(bi) + "}");
            }
            unpack(bi);
        }
    } else {
        for (size_t bi = 0; bi < buckets_.size(); ++bi) {
            pack_missing(bi);
            {
                std::lock_guard<std::mutex> lock(mutex_);
                hand_over_locked(bi);
            }
            const double t0 = mono_s();
            reduce_bucket(bi);
            blocked += mono_s() - t0;
            unpack(bi);
        }
    }
    reset_step();
    ++step_;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.blocked_s += blocked;
        ++stats_.steps;
    }
    if (relayout_pending_)
        relayout_from_first_step(std::all_of(ready_s_.begin(), ready_s_.end(), [](double t) { return t >= 0; }));
}

void GradientSync::reset_step() {
    std::fill(arrived_.begin(), arrived_.end(), 0);
    std::lock_guard<std::mutex> lock(mutex_);
    for (Bucket& b : buckets_) {
        b.remaining = b.slots.size();
        b.state = State::Filling;
    }
}

SyncStats GradientSync::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void GradientSync::watchdog_loop() {
    // The watchdog polls instead of being woken per collective: a wake-up per step put a context switch on the
    // rank's core between backward and every allreduce (30-60 us of a 0.4 ms logreg step at N = 2, measured).
    // Polling at a tenth of the shortest threshold (1 ms .. 1 s) costs one wake-up per period and reports a stall
    // at most that late.
    const double warn = options_.stall_warning_s, abort_after = options_.stall_abort_s;
    double shortest = std::numeric_limits<double>::infinity();
    if (warn > 0) shortest = std::min(shortest, warn);
    if (abort_after > 0) shortest = std::min(shortest, abort_after);
    const auto period = std::chrono::duration<double>(std::clamp(shortest / 10, 1e-3, 1.0));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
        if (inflight_.active) {
            const double age = mono_s() - inflight_.start_s;
            const size_t floats = buckets_[inflight_.bucket].count;
            const size_t bucket = inflight_.bucket;
            const int64_t step = inflight_.step;
            if (abort_after > 0 && age >= abort_after) {
                lock.unlock();
                comm_->abort(stall_abort_text(bucket, floats, step, age, abort_after), 1);  // never returns
            }
            if (warn > 0 && !inflight_.warned && age >= warn) {
                inflight_.warned = true;
                lock.unlock();
                print_stall_warning(comm_->rank(), bucket, floats, step, age);
                lock.lock();
                continue;
            }
        }
        watchdog_cv_.wait_for(lock, period, [&] { return stop_; });
    }
}

// ---------------------------------------------------------------------------------------------------------------------

ParameterAverager::ParameterAverager(comm::Communicator& comm, std::vector<nn::Parameter*> params, size_t fusion_bytes)
    : comm_(comm), params_(std::move(params)) {
    size_t group_bytes = 0, largest = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
        if (!params_[i]) throw Error("ParameterAverager: parameter #" + std::to_string(i) + " is null");
        const size_t bytes = static_cast<size_t>(params_[i]->value.numel()) * sizeof(float);
        const bool fits = !groups_.empty() && fusion_bytes > 0 && group_bytes + bytes <= fusion_bytes;
        if (!fits) {
            groups_.emplace_back();
            group_bytes = 0;
        }
        groups_.back().push_back(i);
        group_bytes += bytes;
        if (groups_.back().size() > 1) largest = std::max(largest, group_bytes / sizeof(float));
    }
    if (comm_.size() > 1) buffer_.resize(largest);  // single-tensor groups are reduced in place
}

void ParameterAverager::average() {
    if (comm_.size() == 1) return;
    for (const auto& g : groups_) {
        // A lone CPU tensor is reduced in place; device tensors are staged through host memory (MPI sees host only).
        if (g.size() == 1 && params_[g[0]]->value.device() == Device::CPU) {
            comm_.allreduce(params_[g[0]]->value.span(), comm::ReduceOp::Average);
            ++collectives_;
            continue;
        }
        size_t need = 0;
        for (size_t i : g) need += static_cast<size_t>(params_[i]->value.numel());
        if (buffer_.size() < need) buffer_.resize(need);
        size_t off = 0;
        for (size_t i : g) {
            const Tensor& v = params_[i]->value;
            copy_floats(buffer_.data() + off, Device::CPU, v.data(), v.device(), static_cast<size_t>(v.numel()));
            off += static_cast<size_t>(v.numel());
        }
        comm_.allreduce(std::span<float>(buffer_.data(), off), comm::ReduceOp::Average);
        ++collectives_;
        off = 0;
        for (size_t i : g) {
            Tensor& v = params_[i]->value;
            copy_floats(v.data(), v.device(), buffer_.data() + off, Device::CPU, static_cast<size_t>(v.numel()));
            off += static_cast<size_t>(v.numel());
        }
    }
}

}  // namespace ringtrain::sync
