// AsyncUploader (see cuda_device.hpp): host -> GPU batch copies on their own stream, ordered by events.
#include <cuda_runtime.h>

#include <cstring>
#include <thread>

#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain {

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
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

    size_t bytes = 0;
    for (const Tensor* t : host) {
        if (t->device() != Device::CPU) throw Error("AsyncUploader: the tensors to upload must be on the CPU");
        bytes += static_cast<size_t>(t->numel()) * sizeof(float);
    }
    // The pinned buffer is free once its previous copy has finished (two uploads ago: normally long done).
    if (slot.used) RT_CUDA_CHECK(cudaEventSynchronize(as_event(slot.copied)));
    slot.pinned.reserve(bytes);

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
        staged_copy(staging + offset, host[i]->data(), n);
        RT_CUDA_CHECK(cudaMemcpyAsync(slot.device[i].data(), staging + offset, n, cudaMemcpyHostToDevice,
                                      as_stream(stream_)));
        offset += n;
    }
    RT_CUDA_CHECK(cudaEventRecord(as_event(slot.copied), as_stream(stream_)));
    RT_CUDA_CHECK(cudaStreamWaitEvent(nullptr, as_event(slot.copied), 0));
    slot.used = true;
    last_ = index;
    return {slot.device.data(), slot.device.size()};
}

}  // namespace ringtrain
