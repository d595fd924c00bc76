// NcclStreamReducer: the device path. When the communicator is a comm::NcclCommunicator (CUDA builds) and every
// gradient lives on the GPU, the buckets live in a device arena and are allreduced on the NCCL stream, ordered by
// CUDA events; nothing goes through host memory and the host never waits for a collective within a step.
//   gradient_ready   enqueues the device-to-device copy into the arena on the default stream (where backward's kernels
//                    run). A filled bucket whose predecessors have all been handed over (bucket order, the same on
//                    every rank) is enqueued on the NCCL stream after an event on the default stream: float32 in place
//                    with ncclAvg, 16-bit wire formats through a 2-byte device buffer. Events before and after it
//                    mark the bucket started / done.
//   reduce_step      enqueues what was not reported, makes the default stream wait for every bucket's done event
//                    (on the GPU) and enqueues the copies back, so the optimizer's kernels see the averages in stream
//                    order. Then the host waits for the previous step's collectives only (polling, with the
//                    StallInspector): it runs at most one step ahead of them. A bucket's time is the GPU time between
//                    its events, so it reaches the stats one step late.
// There is no communication thread and no watchdog thread. The layout is always the size layout: host enqueue times
// say nothing about when the GPU computes a gradient. The stall age counts from the host's enqueue. overlap = false
// enqueues every bucket in reduce_step instead (bitwise the same result).
#include "bucket_reducer.hpp"

#ifdef RINGTRAIN_WITH_CUDA

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "mono_clock.hpp"
#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/telemetry/timeline.hpp"

namespace ringtrain::sync {

namespace {

class NcclStreamReducer final : public ArenaReducer {
public:
    NcclStreamReducer(const ReducerContext& ctx, comm::NcclCommunicator& nccl)
        : ArenaReducer(ctx, Device::CUDA),
          nccl_(nccl),
          inspector_(ctx.comm, ctx.options.stall_warning_s, ctx.options.stall_abort_s),
          overlap_(ctx.options.overlap && ctx.layout.size() > 1) {
        if (ctx.options.wire != comm::WireFormat::Float32)
            wire_ = allocate_floats(ctx.layout.largest_bucket_floats() / 2 + 1, Device::CUDA);
        RT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
        for (auto& set : records_) {
            set.resize(ctx.layout.size());
            // Timing enabled: a bucket's time is cudaEventElapsedTime(start, done).
            for (auto& r : set) {
                RT_CUDA_CHECK(cudaEventCreate(&r.start));
                RT_CUDA_CHECK(cudaEventCreate(&r.done));
            }
        }
    }

    ~NcclStreamReducer() override {
        // Collectives still queued (a step handed over but not synchronised, an exception) may use the arenas. The
        // caching allocator hands freed blocks out again in default-stream order, so the default stream waits for them
        // first (on the GPU: a stuck collective must not hang the host here).
        for (auto& set : records_)
            for (auto& r : set) {
                if (r.pending && r.done != nullptr) (void)cudaStreamWaitEvent(cudaStreamLegacy, r.done, 0);
                if (r.start != nullptr) (void)cudaEventDestroy(r.start);
                if (r.done != nullptr) (void)cudaEventDestroy(r.done);
            }
        if (ready_ != nullptr) (void)cudaEventDestroy(ready_);
    }

    double reduce_step(int64_t step) override {
        // Whatever backward did not report is copied in now; then every bucket is filled and goes to NCCL, in order.
        for (size_t b = 0; b < ctx_.layout.size(); ++b) fill(b, step);
        enqueue_filled(step);
        // The default stream (the optimizer's) waits for each bucket on the GPU, then copies its averages back.
        for (size_t b = 0; b < ctx_.layout.size(); ++b) {
            RT_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, records_[set_][b].done, 0));
            unpack(b);
        }
        // Everything of this step is queued; the host now waits for the previous step's collectives only, so it runs
        // at most one step ahead of them (and a stall is noticed while the GPU still has this step's work to do).
        const double blocked = wait_for(set_ ^ 1);
        set_ ^= 1;
        next_to_enqueue_ = 0;
        end_step();
        return blocked;
    }
    bool overlapping() const override { return overlap_; }
    bool on_device() const override { return true; }
    // The older step's collectives first (set_ is the one the next step records into).
    double drain() override { return wait_for(set_) + wait_for(set_ ^ 1); }

private:
    struct Record {
        cudaEvent_t start = nullptr;  // on the NCCL stream, once it has waited for the bucket's copies
        cudaEvent_t done = nullptr;   // on the NCCL stream, after the bucket's collective (and conversion back)
        bool pending = false;         // recorded, completion not yet seen by the host
        double enqueued_s = 0;        // host time of the hand-over (the stall age counts from here)
        int64_t step = 0;
        uint64_t generation = 0;      // the stats generation it was issued in (see SharedSyncStats)
    };

    void bucket_filled(size_t, int64_t step) override {
        if (overlap_) enqueue_filled(step);
    }

    // Enqueues, in bucket order, every filled bucket not yet enqueued.
    void enqueue_filled(int64_t step) {
        cudaStream_t nccl_stream = static_cast<cudaStream_t>(nccl_.stream());
        while (next_to_enqueue_ < ctx_.layout.size() && filled(next_to_enqueue_)) {
            const size_t b = next_to_enqueue_++;
            Record& r = records_[set_][b];
            // The bucket's copies (and all of backward so far) are queued on the default stream: NCCL starts after them.
            RT_CUDA_CHECK(cudaEventRecord(ready_, cudaStreamLegacy));
            RT_CUDA_CHECK(cudaStreamWaitEvent(nccl_stream, ready_, 0));
            RT_CUDA_CHECK(cudaEventRecord(r.start, nccl_stream));
            nccl_.allreduce_device_async(bucket_data(b), ctx_.layout.bucket(b).count, comm::ReduceOp::Average,
                                         ctx_.options.wire, wire_.get());
            RT_CUDA_CHECK(cudaEventRecord(r.done, nccl_stream));
            r.pending = true;
            r.enqueued_s = mono_s();
            r.step = step;
            r.generation = ctx_.stats.collective_issued(b);
        }
    }

    // Polls one step's done events (stall warning/abort, bucket times); returns the time blocked.
    double wait_for(int set) {
        using namespace std::chrono_literals;
        telemetry::Timeline* tl = ctx_.timeline;
        const double t0 = mono_s();
        const int64_t t0_us = tl && tl->enabled() ? tl->now_us() : 0;
        bool waited = false;
        for (size_t b = 0; b < ctx_.layout.size(); ++b) {
            Record& r = records_[set][b];
            if (!r.pending) continue;
            const CollectiveTag tag{b, ctx_.layout.bucket(b).count, r.step};
            bool warned = false;
            double last_poll_s = mono_s();
            // Polling, not cudaEventSynchronize: a blocking wait could not warn about, or abort, a collective that
            // never finishes (a dead or stuck rank).
            for (unsigned polls = 0;; ++polls) {
                const cudaError_t q = cudaEventQuery(r.done);
                if (q == cudaSuccess) break;
                if (q != cudaErrorNotReady)
                    cuda_check(static_cast<int>(q), "cudaEventQuery (allreduce of a gradient bucket)");
                waited = true;
                const double now_s = mono_s();
                // A poll a second after the last one (they sleep at most 200 us): the process was suspended (SIGSTOP,
                // Slurm's suspend), and that time is no rank's stall (as StallWatchdog).
                if (now_s - last_poll_s > 1.0) r.enqueued_s += now_s - last_poll_s;
                last_poll_s = now_s;
                const double age = now_s - r.enqueued_s;
                if (polls % 256 == 255) {
                    // A failed peer or network shows up as NCCL's asynchronous error; the collective then never
                    // completes and nothing queued behind it can be cleaned up: take the job down as the stall abort
                    // does.
                    try {
                        nccl_.check_async_error();
                    } catch (const Error& e) {
                        inspector_.abort_with(tag, age, e.what());
                    }
                }
                inspector_.inspect(tag, age, warned);
                // Short sleeps: the GPU usually still has this step's work queued, so waking a little late costs
                // nothing.
                std::this_thread::sleep_for(polls < 64 ? 20us : 200us);
            }
            float ms = 0;
            RT_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.done));
            r.pending = false;
            ctx_.stats.collective_time(b, static_cast<double>(ms) * 1e-3, r.generation);
        }
        if (!waited) return 0;
        if (tl && tl->enabled()) tl->add("wait", "sync", t0_us, tl->now_us() - t0_us);
        return mono_s() - t0;
    }

    comm::NcclCommunicator& nccl_;
    StallInspector inspector_;
    bool overlap_;
    std::shared_ptr<float> wire_;  // 2-byte values of the largest bucket (16-bit wire formats only). One buffer is
                                   // enough: only work on the NCCL stream touches it, one bucket after the other.
    // Default stream -> NCCL stream, recorded again for every bucket: cudaStreamWaitEvent waits for the record that
    // was last made when the wait is enqueued, so one event serves all of them.
    cudaEvent_t ready_ = nullptr;
    // Per bucket, one set for even and one for odd steps: step s is enqueued while step s−1's collectives may still
    // run, so s must not record over the events the host has yet to poll for s−1.
    std::vector<Record> records_[2];
    int set_ = 0;                 // the set this step records into
    size_t next_to_enqueue_ = 0;  // buckets are handed to NCCL strictly in order
};

}  // namespace

std::unique_ptr<BucketReducer> make_nccl_stream_reducer(const ReducerContext& ctx) {
    auto* nccl = dynamic_cast<comm::NcclCommunicator*>(&ctx.comm);
    if (nccl == nullptr) return nullptr;
    // NCCL reduces device memory only; host gradients (a CPU model on the nccl backend) take a host path, which
    // stages through the communicator's pinned buffers.
    for (const nn::Parameter* p : ctx.params)
        if (p->grad.device() != Device::CUDA) return nullptr;
    return std::make_unique<NcclStreamReducer>(ctx, *nccl);
}

}  // namespace ringtrain::sync

#else  // no CUDA: the device path never applies

namespace ringtrain::sync {

std::unique_ptr<BucketReducer> make_nccl_stream_reducer(const ReducerContext&) { return nullptr; }

}  // namespace ringtrain::sync

#endif  // RINGTRAIN_WITH_CUDA
