// CUDA device selection, the caching device allocator's statistics, pinned host buffers and CUDA error checks.
// This header needs no CUDA headers. In a build without CUDA (RINGTRAIN_WITH_CUDA undefined) the functions that
// need a GPU throw a clear Error, and cuda_device_count() is 0.
//
// Streams: every op runs on the CUDA legacy default stream (stream 0), so ops are ordered with each other and with
// the allocator's reuse of freed blocks; the NCCL communicator runs on its own stream, ordered by events.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/tensor.hpp"

namespace ringtrain {

// Visible CUDA devices; 0 when the build has no CUDA, there is no driver or no device (never throws).
int cuda_device_count();

// Makes GPU (local_rank % visible devices) current for this process and returns its index. Throws Error when no
// device is visible (or the build has no CUDA).
int select_cuda_device(int local_rank);

// "NVIDIA H100 80GB HBM3 (cuda:0, sm_90, 79.1 GiB)" for the current device; Error without one.
std::string cuda_device_description();
// PCI bus id of the current device ("0000:3B:00.0"), the key NVML knows it by whatever CUDA_VISIBLE_DEVICES says.
std::string cuda_pci_bus_id();

struct CudaAllocatorStats {
    size_t bytes_in_use = 0;   // blocks handed out (rounded to their size class)
    size_t bytes_cached = 0;   // blocks kept for reuse
    size_t peak_bytes_in_use = 0;
    uint64_t device_allocations = 0;  // cudaMalloc calls so far (flat in a steady-state step loop)
};
CudaAllocatorStats cuda_allocator_stats();
// Returns every cached (free) block to the driver.
void cuda_empty_cache();

// Throws Error("<call> failed: <cudaGetErrorString> (code N)") unless status == cudaSuccess (0).
// `status` is a cudaError_t converted to int, so callers need no CUDA headers here.
void cuda_check(int status, const char* call);
#define RT_CUDA_CHECK(expr) ::ringtrain::cuda_check(static_cast<int>(expr), #expr)

// Waits for all work on the current device.
void cuda_synchronize();
// Waits for the work queued on the default (legacy) stream only: the layers' kernels, not the gradient
// collectives that run on NCCL's own stream meanwhile (a per-layer timing must not count those).
void cuda_synchronize_default_stream();

// Page-locked host memory for staging host<->device copies (grow-only; never shrinks).
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t bytes) { reserve(bytes); }
    ~PinnedBuffer();
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    PinnedBuffer(PinnedBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr, o.bytes_ = 0; }

    // Ensures at least `bytes` of capacity (contents are not kept when it grows).
    void reserve(size_t bytes);
    void* data() const { return data_; }
    float* floats() const { return static_cast<float*>(data_); }
    size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// Copies host tensors (a batch) to the GPU without making the host wait. The copy runs on a stream of its own; the
// default stream, where the ops run, waits for it with an event. So the copy of batch k+1 runs while batch k is
// computed, and the host queues step k+1 while step k runs instead of stalling on a pageable cudaMemcpy (which waits
// for all queued work first).
// Host tensors in page-locked memory (host_tensor()) are copied from directly; a loader that fills its batches there
// saves the host a copy of every batch (77 MB a step for AlexNet at 128 x 3 x 224 x 224), but must not write such a
// tensor again before wait_for_host_reads() has returned. Other host tensors are first copied into one of two pinned
// staging buffers, and are free again when upload() returns.
// The two device slots alternate: the tensors upload() returns stay valid for work queued on the default stream until
// the call after next; a slot is overwritten only once the default-stream work queued while it was in use has run.
class AsyncUploader {
public:
    AsyncUploader();  // on the current device (select_cuda_device first)
    ~AsyncUploader();
    AsyncUploader(const AsyncUploader&) = delete;
    AsyncUploader& operator=(const AsyncUploader&) = delete;

    // Device copies of `host` (CPU tensors), in order. Throws Error on a CUDA failure or a non-CPU input.
    std::span<const Tensor> upload(std::span<const Tensor* const> host);
    // A CPU tensor in page-locked memory, which upload() copies from directly; callable from any thread (a loader's
    // prefetch thread). Its memory goes back when the last tensor sharing it does. Where the system refuses to
    // page-lock more memory: a plain tensor (staged by upload()) and one warning on stderr.
    Tensor host_tensor(Shape shape) const;
    // Returns once no copy that upload() queued still reads a host tensor in place: such a tensor may be written again.
    void wait_for_host_reads();
    // Uploads so far that had to wait for the compute stream because a device buffer grew (first uses, new shapes).
    uint64_t reallocations() const { return reallocations_; }
    // Host tensors so far copied in place, and through a staging buffer.
    uint64_t direct_copies() const { return direct_copies_; }
    uint64_t staged_copies() const { return staged_copies_; }

private:
    struct Slot {
        PinnedBuffer pinned;
        std::vector<Tensor> device;
        void* copied = nullptr;    // cudaEvent_t on the copy stream: this slot's last copy finished
        void* released = nullptr;  // cudaEvent_t on the default stream: work that read this slot has run
        bool used = false;
        bool reads_host = false;   // its last copy reads host tensors in place, and may not have finished
    };
    Slot slots_[2];
    int device_ = 0;          // the device the uploader was made on: host_tensor() makes it current on its thread
    void* stream_ = nullptr;  // cudaStream_t (non-blocking: no implicit sync with the legacy default stream)
    void* now_ = nullptr;     // cudaEvent_t, for an upload that must follow everything queued so far
    int last_ = -1;           // the slot handed out by the previous call
    uint64_t reallocations_ = 0;
    uint64_t direct_copies_ = 0;
    uint64_t staged_copies_ = 0;
    mutable std::atomic<bool> warned_{false};  // host_tensor() fell back to plain memory (said once)
};

#ifndef RINGTRAIN_WITH_CUDA
// ---- builds without CUDA: nothing to select; everything that needs a GPU says so ----
namespace detail {
[[noreturn]] inline void no_cuda_build(const char* what) {
    throw Error(std::string(what) + ": this build of ringtrain has no CUDA support; set device to cpu, or rebuild with "
                "-DRINGTRAIN_CUDA=ON on a machine with the CUDA toolkit, cuDNN and NCCL");
}
}  // namespace detail
inline int cuda_device_count() { return 0; }
inline int select_cuda_device(int) { detail::no_cuda_build("select_cuda_device"); }
inline std::string cuda_device_description() { detail::no_cuda_build("cuda_device_description"); }
inline std::string cuda_pci_bus_id() { detail::no_cuda_build("cuda_pci_bus_id"); }
inline CudaAllocatorStats cuda_allocator_stats() { return {}; }
inline void cuda_empty_cache() {}
inline void cuda_check(int status, const char* call) {
    if (status != 0) detail::no_cuda_build(call);
}
inline void cuda_synchronize() {}
inline void cuda_synchronize_default_stream() {}
inline PinnedBuffer::~PinnedBuffer() = default;
inline void PinnedBuffer::reserve(size_t) { detail::no_cuda_build("PinnedBuffer"); }
inline AsyncUploader::AsyncUploader() { detail::no_cuda_build("AsyncUploader"); }
inline AsyncUploader::~AsyncUploader() = default;
inline std::span<const Tensor> AsyncUploader::upload(std::span<const Tensor* const>) {
    detail::no_cuda_build("AsyncUploader");
}
inline Tensor AsyncUploader::host_tensor(Shape) const { detail::no_cuda_build("AsyncUploader"); }
inline void AsyncUploader::wait_for_host_reads() {}
#endif

}  // namespace ringtrain
