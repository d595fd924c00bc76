// GradientSync's device path: fusion buckets in a device arena, allreduced on the NCCL stream, ordered by CUDA events
// (see the header). In builds without CUDA the path never applies (init_device() says no).
#include "ringtrain/sync/gradient_sync.hpp"

#ifdef RINGTRAIN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "gradient_sync_detail.hpp"
#include "ringtrain/comm/nccl_communicator.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"
#include "ringtrain/telemetry/timeline.hpp"

namespace ringtrain::sync {

using detail::mono_s;
using detail::print_stall_warning;
using detail::stall_abort_text;
using detail::stall_text;

struct GradientSync::DeviceState {
    comm::NcclCommunicator* nccl = nullptr;
    std::shared_ptr<float> arena;  // float32: every bucket's slot
    std::shared_ptr<float> wire;   // 2-byte values of the largest bucket (16-bit wire formats only). One buffer is
                                   // enough: only work on the NCCL stream touches it, one bucket after the other.
    // Default stream -> NCCL stream, recorded again for every bucket: cudaStreamWaitEvent waits for the record that
    // was last made when the wait is enqueued, so one event serves all of them.
    cudaEvent_t ready = nullptr;
    struct Record {
        cudaEvent_t start = nullptr;  // on the NCCL stream, once it has waited for the bucket's copies
        cudaEvent_t done = nullptr;   // on the NCCL stream, after the bucket's collective (and conversion back)
        bool pending = false;         // recorded, completion not yet seen by the host
        double enqueued_s = 0;        // host time of the hand-over (the stall age counts from here)
        int64_t step = 0;
    };
    // Per bucket, one set for even and one for odd steps: step s is enqueued while step s−1's collectives may still
    // run, so s must not record over the events the host has yet to poll for s−1.
    std::vector<Record> records[2];
    int set = 0;                 // the set this step records into
    size_t next_to_enqueue = 0;  // buckets are handed to NCCL strictly in order
};

void GradientSync::DeviceStateDeleter::operator()(DeviceState* d) const {
    // Collectives still queued (a step handed over but not synchronised, an exception) may use the arenas. The caching
    // allocator hands freed blocks out again in default-stream order, so the default stream waits for them first
    // (on the GPU: a stuck collective must not hang the host here).
    for (auto& set : d->records)
        for (auto& r : set) {
            if (r.pending && r.done != nullptr) (void)cudaStreamWaitEvent(cudaStreamLegacy, r.done, 0);
            if (r.start != nullptr) (void)cudaEventDestroy(r.start);
            if (r.done != nullptr) (void)cudaEventDestroy(r.done);
        }
    if (d->ready != nullptr) (void)cudaEventDestroy(d->ready);
    delete d;
}

bool GradientSync::init_device() {
    auto* nccl = dynamic_cast<comm::NcclCommunicator*>(comm_);
    if (nccl == nullptr) return false;
    // NCCL reduces device memory only; host gradients (a CPU model on the nccl backend) take the host path, which
    // stages through the communicator's pinned buffers.
    for (const nn::Parameter* p : params_)
        if (p->grad.device() != Device::CUDA) return false;
    std::unique_ptr<DeviceState, DeviceStateDeleter> d(new DeviceState);
    d->nccl = nccl;
    size_t total = 0, largest = 0;
    for (const Bucket& b : buckets_) {
        total += b.count;
        largest = std::max(largest, b.count);
    }
    d->arena = allocate_floats(std::max<size_t>(total, 1), Device::CUDA);
    if (options_.wire != comm::WireFormat::Float32) d->wire = allocate_floats(largest / 2 + 1, Device::CUDA);
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming));
    for (auto& set : d->records) {
        set.resize(buckets_.size());
        // Timing enabled: a bucket's time is cudaEventElapsedTime(start, done).
        for (auto& r : set) {
            RT_CUDA_CHECK(cudaEventCreate(&r.start));
            RT_CUDA_CHECK(cudaEventCreate(&r.done));
        }
    }
    dev_arena_ = d->arena.get();
    dev_ = std::move(d);
    // The collectives run on the NCCL stream while the default stream goes on with backward, so more than one bucket
    // does overlap; one bucket can only start once backward is over.
    overlap_ = options_.overlap && buckets_.size() > 1;
    return true;
}

void GradientSync::device_enqueue_complete() {
    DeviceState& d = *dev_;
    cudaStream_t nccl_stream = static_cast<cudaStream_t>(d.nccl->stream());
    while (d.next_to_enqueue < buckets_.size() && buckets_[d.next_to_enqueue].remaining == 0) {
        const size_t bi = d.next_to_enqueue++;
        const Bucket& b = buckets_[bi];
        DeviceState::Record& r = d.records[d.set][bi];
        // The bucket's copies (and all of backward so far) are queued on the default stream: NCCL starts after them.
        RT_CUDA_CHECK(cudaEventRecord(d.ready, cudaStreamLegacy));
        RT_CUDA_CHECK(cudaStreamWaitEvent(nccl_stream, d.ready, 0));
        RT_CUDA_CHECK(cudaEventRecord(r.start, nccl_stream));
        d.nccl->allreduce_device_async(dev_arena_ + b.offset, b.count, comm::ReduceOp::Average, options_.wire,
                                       d.wire.get());
        RT_CUDA_CHECK(cudaEventRecord(r.done, nccl_stream));
        r.pending = true;
        r.enqueued_s = mono_s();
        r.step = step_;
        std::lock_guard<std::mutex> lock(mutex_);
        hand_over_locked(bi);
        stats_.collectives += 1;
        stats_.buckets[bi].calls += 1;
    }
}

double GradientSync::device_synchronize() {
    DeviceState& d = *dev_;
    // Whatever backward did not report is copied in now; then every bucket is complete and goes to NCCL, in order.
    for (size_t bi = 0; bi < buckets_.size(); ++bi) pack_missing(bi);
    device_enqueue_complete();
    // The default stream (the optimizer's) waits for each bucket on the GPU, then copies its averages back.
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
        RT_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, d.records[d.set][bi].done, 0));
        unpack(bi);
    }
    // Everything of this step is queued; the host now waits for the previous step's collectives only, so it runs at
    // most one step ahead of them (and a stall is noticed while the GPU still has this step's work to do).
    const double blocked = device_wait_for(d.set ^ 1);
    d.set ^= 1;
    d.next_to_enqueue = 0;
    return blocked;
}

double GradientSync::device_wait_for(int set) {
    using namespace std::chrono_literals;
    DeviceState& d = *dev_;
    const double warn = options_.stall_warning_s, abort_after = options_.stall_abort_s;
    const double t0 = mono_s();
    const int64_t t0_us = timeline_ && timeline_->enabled() ? timeline_->now_us() : 0;
    bool waited = false;
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
        DeviceState::Record& r = d.records[set][bi];
        if (!r.pending) continue;
        bool warned = false;
        // Polling, not cudaEventSynchronize: a blocking wait could not warn about, or abort, a collective that never
        // finishes (a dead or stuck rank).
        for (unsigned polls = 0;; ++polls) {
            const cudaError_t q = cudaEventQuery(r.done);
            if (q == cudaSuccess) break;
            if (q != cudaErrorNotReady) cuda_check(static_cast<int>(q), "cudaEventQuery (allreduce of a gradient bucket)");
            waited = true;
            const double age = mono_s() - r.enqueued_s;
            if (polls % 256 == 255) {
                // A failed peer or network shows up as NCCL's asynchronous error; the collective then never completes
                // and nothing queued behind it can be cleaned up: take the job down as the stall abort does.
                try {
                    d.nccl->check_async_error();
                } catch (const Error& e) {
                    comm_->abort(stall_text(bi, buckets_[bi].count, r.step, age) + ": " + e.what(), 1);
                }
            }
            if (abort_after > 0 && age >= abort_after)
                comm_->abort(stall_abort_text(bi, buckets_[bi].count, r.step, age, abort_after), 1);  // never returns
            if (warn > 0 && !warned && age >= warn) {
                warned = true;
                print_stall_warning(comm_->rank(), bi, buckets_[bi].count, r.step, age);
            }
            // Short sleeps: the GPU usually still has this step's work queued, so waking a little late costs nothing.
            std::this_thread::sleep_for(polls < 64 ? 20us : 200us);
        }
        float ms = 0;
        RT_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.done));
        r.pending = false;
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.buckets[bi].total_s += static_cast<double>(ms) * 1e-3;
    }
    if (!waited) return 0;
    if (timeline_ && timeline_->enabled()) timeline_->add("wait", "sync", t0_us, timeline_->now_us() - t0_us, "{}");
    return mono_s() - t0;
}

}  // namespace ringtrain::sync

#else  // no CUDA: the device path never applies

namespace ringtrain::sync {

struct GradientSync::DeviceState {};
void GradientSync::DeviceStateDeleter::operator()(DeviceState* d) const { delete d; }
bool GradientSync::init_device() { return false; }
void GradientSync::device_enqueue_complete() {}
double GradientSync::device_synchronize() { return 0; }
double GradientSync::device_wait_for(int) { return 0; }

}  // namespace ringtrain::sync

#endif  // RINGTRAIN_WITH_CUDA
