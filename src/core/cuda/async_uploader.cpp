// AsyncUploader (see cuda_device.hpp): host -> GPU batch copies on their own stream, ordered by events.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <cstring>
#include <thread>
#include <vector>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
// True when `p` lies in page-locked host memory that CUDA knows (cudaHostAlloc, cudaHostRegister): a copy can read it in
// place, asynchronously. Pageable memory answers cudaMemoryTypeUnregistered.
bool is_page_locked(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();  // older drivers report pageable memory as an error: clear it, it is not one
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}
void* new_event() {
    cudaEvent_t e = nullptr;
    RT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}
// A large batch (128 images of 3x224x224) took one thread about as long to copy as the GPU's step
// (bench/RESULTS.md, "Measurements moved out of code comments"): above 16 MiB, four threads copy a quarter each.
void staged_copy(char* dst, const float* src, size_t bytes) {
    constexpr size_t kSplitAbove = size_t{16} << 20;
    constexpr size_t kParts = 4;
    const char* from = reinterpret_cast<const char*>(src);
    if (bytes <= kSplitAbove) {
        std::memcpy(dst, from, bytes);
        return;
    }
    auto part = [&](size_t k) {
        const size_t b = bytes * k / kParts, e = bytes * (k + 1) / kParts;
        std::memcpy(dst + b, from + b, e - b);
    };
    std::thread helpers[kParts - 1];
    for (size_t k = 1; k < kParts; ++k) helpers[k - 1] = std::thread(part, k);
    part(0);
    for (auto& t : helpers) t.join();
}

}  // namespace

AsyncUploader::AsyncUploader() {
    RT_CUDA_CHECK(cudaGetDevice(&device_));
    cudaStream_t s = nullptr;
    // Non-blocking: a blocking stream would be implicitly serialised with the legacy default stream.
    RT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    now_ = new_event();
    for (Slot& slot : slots_) {
        slot.copied = new_event();
        slot.released = new_event();
    }
}

AsyncUploader::~AsyncUploader() {
    // Unwinding after a failure: the copy stream may wait (through the default stream) for a collective that never
    // ends; leave the events and slots as they are rather than block the rank's way to its error report.
    if (std::uncaught_exceptions() > 0) return;
    if (stream_ != nullptr) (void)cudaStreamSynchronize(as_stream(stream_));
    // The default stream may still read the slots' tensors: their storage goes back to the caching allocator, whose
    // reuse is ordered on that stream, so dropping them here is safe. Events are destroyed after the work they mark.
    for (Slot& slot : slots_) {
        if (slot.copied != nullptr) (void)cudaEventDestroy(as_event(slot.copied));
        if (slot.released != nullptr) (void)cudaEventDestroy(as_event(slot.released));
    }
    if (now_ != nullptr) (void)cudaEventDestroy(as_event(now_));
    if (stream_ != nullptr) (void)cudaStreamDestroy(as_stream(stream_));
}

std::span<const Tensor> AsyncUploader::upload(std::span<const Tensor* const> host) {
    // Everything that reads the previous slot has been queued on the default stream by now.
    if (last_ >= 0) RT_CUDA_CHECK(cudaEventRecord(as_event(slots_[last_].released), nullptr));
    const int index = last_ == 0 ? 1 : 0;
    Slot& slot = slots_[index];

    size_t staged_bytes = 0;
    std::vector<bool> in_place(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
        const Tensor* t = host[i];
        if (t->device() != Device::CPU) throw Error("AsyncUploader: the tensors to upload must be on the CPU");
        if (t->numel() == 0) continue;
        in_place[i] = is_page_locked(t->data());
        if (!in_place[i]) staged_bytes += static_cast<size_t>(t->numel()) * sizeof(float);
    }
    // The slot's staging buffer is free once its previous copy has finished (two uploads ago: normally long done).
    if (slot.used) RT_CUDA_CHECK(cudaEventSynchronize(as_event(slot.copied)));
    // Cleared now, set again only once this upload's `copied` event is recorded: if a call below throws, no later
    // wait trusts an event that does not cover the copies queued so far (the throw ends the run anyway).
    slot.reads_host = false;
    bool reads_host = false;
    if (staged_bytes > 0) slot.pinned.reserve(staged_bytes);

    slot.device.resize(host.size());
    bool grew = !slot.used;
    for (size_t i = 0; i < host.size(); ++i) {
        const float* before = slot.device[i].data();
        slot.device[i].resize(host[i]->shape(), Device::CUDA);
        grew = grew || (slot.device[i].data() != before && host[i]->numel() > 0);
    }
    if (grew) {
        // New device blocks come from the caching allocator, whose reuse is ordered on the default stream only: a
        // block may still be read by queued work of its previous owner. Wait for everything queued so far.
        RT_CUDA_CHECK(cudaEventRecord(as_event(now_), nullptr));
        RT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream_), as_event(now_), 0));
        ++reallocations_;
    } else {
        RT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream_), as_event(slot.released), 0));
    }

    char* staging = static_cast<char*>(slot.pinned.data());
    size_t offset = 0;
    for (size_t i = 0; i < host.size(); ++i) {
        const size_t n = static_cast<size_t>(host[i]->numel()) * sizeof(float);
        if (n == 0) continue;
        const void* from = host[i]->data();
        if (in_place[i]) {
            reads_host = true;
            ++direct_copies_;
        } else {
            staged_copy(staging + offset, host[i]->data(), n);
            from = staging + offset;
            offset += n;
            ++staged_copies_;
        }
        RT_CUDA_CHECK(
            cudaMemcpyAsync(slot.device[i].data(), from, n, cudaMemcpyHostToDevice, as_stream(stream_)));
    }
    RT_CUDA_CHECK(cudaEventRecord(as_event(slot.copied), as_stream(stream_)));
    slot.reads_host = reads_host;
    RT_CUDA_CHECK(cudaStreamWaitEvent(nullptr, as_event(slot.copied), 0));
    slot.used = true;
    last_ = index;
    return {slot.device.data(), slot.device.size()};
}

Tensor AsyncUploader::host_tensor(Shape shape) const {
    const int64_t n = shape_numel(shape);
    if (n == 0) return Tensor(std::move(shape));
    // A loader's thread has no current device of its own: without this, the allocation would create a context on
    // device 0 in every rank of a multi-GPU node. Portable: page-locked for every context, whichever made it.
    RT_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        // Page-locked memory is limited (ulimit -l, the container's share): plain memory works too, upload() stages it.
        (void)cudaGetLastError();
        if (!warned_.exchange(true))
            std::fprintf(stderr, "ringtrain: warning: could not page-lock %.1f MiB of host memory for a batch; batches "
                                 "are copied through a staging buffer instead (one more host copy per batch)\n",
                         static_cast<double>(bytes) / 1048576.0);
        return Tensor(std::move(shape));
    }
    // A copy queued from this memory may still be running when the last tensor goes (a loader dropped at the end of
    // an evaluation): wait for the device before the memory goes back. Rare (end of a loader, a batch outgrowing it).
    std::shared_ptr<float> storage(static_cast<float*>(p), [device = device_](float* q) {
        // Unwinding after a failure (a peer died, say): the device may wait for a collective that never ends, and
        // both a device sync and cudaFreeHost would block this rank before it can report and end the job. Leave the
        // memory to the process's end.
        if (std::uncaught_exceptions() > 0) return;
        if (cudaSetDevice(device) == cudaSuccess) (void)cudaDeviceSynchronize();
        (void)cudaFreeHost(q);
    });
    return Tensor::over_host_storage(std::move(storage), std::move(shape));
}

void AsyncUploader::wait_for_host_reads() {
    for (Slot& slot : slots_) {
        if (!slot.reads_host) continue;
        RT_CUDA_CHECK(cudaEventSynchronize(as_event(slot.copied)));
        slot.reads_host = false;
    }
}

}  // namespace ringtrain
