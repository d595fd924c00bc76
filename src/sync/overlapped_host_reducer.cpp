// OverlappedHostReducer: a communication thread allreduces each bucket as soon as backward has filled it, while
// backward goes on. Buckets are reduced strictly in bucket order (bucket b+1 waits for bucket b even if it filled
// first), so every rank issues the same collectives in the same order. The thread uses the communicator GradientSync
// was given for itself, which needs MPI_THREAD_MULTIPLE.
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "bucket_reducer.hpp"
#include "mono_clock.hpp"
#include "ringtrain/comm/mpi_runtime.hpp"
#include "ringtrain/telemetry/timeline.hpp"

namespace ringtrain::sync {

namespace {

class OverlappedHostReducer final : public ArenaReducer {
public:
    explicit OverlappedHostReducer(const ReducerContext& ctx)
        : ArenaReducer(ctx, Device::CPU), allreduce_(ctx), buckets_(ctx.layout.size()) {
        thread_ = std::thread([this] { comm_loop(); });
    }

    // Stops after the collective it is running (it starts no new ones) and joins.
    ~OverlappedHostReducer() override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

    double reduce_step(int64_t step) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (error_) std::rethrow_exception(error_);
        }
        // Hand over what backward did not report, in bucket order (the thread reduces in that order anyway).
        for (size_t b = 0; b < buckets_.size(); ++b) fill(b, step);
        double blocked = 0;
        telemetry::Timeline* tl = ctx_.timeline;
        for (size_t b = 0; b < buckets_.size(); ++b) {
            bool waited = false;
            const double t0 = mono_s();
            const int64_t t0_us = tl && tl->enabled() ? tl->now_us() : 0;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                auto ready = [&] { return buckets_[b].state == State::Done || error_; };
                if (!ready()) {
                    waited = true;
                    cv_.wait(lock, ready);
                }
                if (error_) std::rethrow_exception(error_);
            }
            if (waited) {
                blocked += mono_s() - t0;
                if (tl && tl->enabled()) tl->add("wait", "sync", t0_us, tl->now_us() - t0_us, {{"bucket", b}});
            }
            unpack(b);
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (BucketState& s : buckets_) s.state = State::Filling;
        }
        end_step();
        return blocked;
    }
    bool overlapping() const override { return true; }
    bool on_device() const override { return false; }

private:
    enum class State { Filling, Queued, Running, Done };
    struct BucketState {
        State state = State::Filling;
        int64_t step = 0;
    };

    void bucket_filled(size_t b, int64_t step) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            buckets_[b].state = State::Queued;
            buckets_[b].step = step;
        }
        cv_.notify_all();
    }

    void comm_loop() {
        if (ctx_.timeline) ctx_.timeline->name_thread("gradient sync");
        for (;;) {
            size_t b;
            int64_t step;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                cv_.wait(lock, [&] { return stop_ || buckets_[next_].state == State::Queued; });
                if (stop_) return;
                b = next_;
                step = buckets_[b].step;
                buckets_[b].state = State::Running;
            }
            try {
                allreduce_.run(b, step, bucket_data(b), reduce_count(b));
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
                buckets_[b].state = State::Done;
                next_ = (b + 1) % buckets_.size();
            }
            cv_.notify_all();
        }
    }

    HostBucketAllreduce allreduce_;
    std::mutex mutex_;
    std::condition_variable cv_;  // bucket state changes, stop
    std::vector<BucketState> buckets_;  // guarded by mutex_
    size_t next_ = 0;                   // the thread's next bucket (guarded)
    bool stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;
};

}  // namespace

std::unique_ptr<BucketReducer> make_overlapped_host_reducer(const ReducerContext& ctx) {
    // One bucket can only be reduced once backward is over, so a communication thread could hide nothing and would
    // only add a hand-over per step (bench/RESULTS.md, "GradientSync: the measurements behind its choices").
    if (!ctx.options.overlap || ctx.layout.size() <= 1) return nullptr;
    if (!comm::mpi_thread_multiple()) {
        if (ctx.comm.rank() == 0)
            std::fprintf(stderr,
                         "ringtrain: rank 0: warning: MPI does not provide MPI_THREAD_MULTIPLE (it gives %s); gradient "
                         "allreduces run on the training thread (sync.overlap is off)\n",
                         comm::thread_level_name(comm::mpi_thread_level()));
        return nullptr;
    }
    return std::make_unique<OverlappedHostReducer>(ctx);
}

}  // namespace ringtrain::sync
