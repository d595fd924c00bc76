// CUDA builds: Tensor storage on the GPU from a caching allocator, host<->device copies, fills, device selection
// and pinned host buffers. The CPU-only versions of allocate_floats/copy_floats/fill_floats/cuda_available are in
// src/core/memory.cpp under #ifndef RINGTRAIN_WITH_CUDA.
//
// Allocator: block sizes are rounded to size classes (512 B steps below 1 MiB, 2 MiB steps above); a freed block
// goes to a free list keyed by its size and is handed out again to any request of the same class, or a larger one
// up to twice its size. Once a training step's shapes are stable no cudaMalloc happens. All GPU work runs on the
// legacy default stream, so reusing a freed block for the next op is ordered after every earlier use. When
// cudaMalloc fails, the cache is returned to the driver and the allocation retried once.
#include <cuda_runtime.h>

#include <exception>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "fill_kernel.hpp"
#include "ringtrain/core/cuda_device.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/memory.hpp"

namespace ringtrain {

void cuda_check(int status, const char* call) {
    if (status == cudaSuccess) return;
    const auto err = static_cast<cudaError_t>(status);
    throw Error(std::string("CUDA call ") + call + " failed: " + cudaGetErrorString(err) + " (" +
                cudaGetErrorName(err) + ", code " + std::to_string(status) + ")");
}

namespace {

constexpr size_t kAlignment = 64;

std::shared_ptr<float> allocate_cpu(size_t count) {
    size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

std::string mib(size_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

class CachingAllocator {
public:
    static size_t size_class(size_t bytes) {
        constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallLimit = size_t{1} << 20;
        if (bytes == 0) bytes = 1;
        if (bytes < kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
        return (bytes + kLarge - 1) / kLarge * kLarge;
    }

    void* allocate(size_t bytes, size_t* block_bytes) {
        const size_t want = size_class(bytes);
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = free_.lower_bound(want);
        if (it != free_.end() && it->first <= 2 * want) {
            void* p = it->second.back();
            it->second.pop_back();
            const size_t got = it->first;
            if (it->second.empty()) free_.erase(it);
            stats_.bytes_cached -= got;
            note_in_use(got);
            *block_bytes = got;
            return p;
        }
        void* p = nullptr;
        cudaError_t rc = cudaMalloc(&p, want);
        if (rc == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();  // clear it, give the cache back, try once more
            release_cached_locked();
            rc = cudaMalloc(&p, want);
        }
        if (rc != cudaSuccess) {
            (void)cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            throw Error(std::string("CUDA call cudaMalloc(") + std::to_string(want) + " bytes) failed: " +
                        cudaGetErrorString(rc) + "; ringtrain holds " + mib(stats_.bytes_in_use) + " in tensors, " +
                        mib(free_b) + " of " + mib(total_b) +
                        " free on the device (use a smaller batch size, or a GPU with more memory)");
        }
        ++stats_.device_allocations;
        note_in_use(want);
        *block_bytes = want;
        return p;
    }

    void release(void* p, size_t block_bytes) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        try {
            free_[block_bytes].push_back(p);
        } catch (...) {
            (void)cudaFree(p);
            stats_.bytes_in_use -= block_bytes;
            return;
        }
        stats_.bytes_in_use -= block_bytes;
        stats_.bytes_cached += block_bytes;
    }

    void empty_cache() {
        std::lock_guard<std::mutex> lock(mutex_);
        release_cached_locked();
    }

    CudaAllocatorStats stats() {
        std::lock_guard<std::mutex> lock(mutex_);
        return stats_;
    }

private:
    void note_in_use(size_t b) {
        stats_.bytes_in_use += b;
        stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    }
    void release_cached_locked() {
        (void)cudaDeviceSynchronize();
        for (auto& [size, blocks] : free_)
            for (void* p : blocks) (void)cudaFree(p);
        free_.clear();
        stats_.bytes_cached = 0;
    }

    std::mutex mutex_;
    std::map<size_t, std::vector<void*>> free_;
    CudaAllocatorStats stats_;
};

// Never destroyed: tensors may be released during static destruction, after the CUDA runtime is gone.
CachingAllocator& allocator() {
    static CachingAllocator* a = new CachingAllocator();
    return *a;
}

}  // namespace

// ---- memory.hpp ----

bool cuda_available() { return cuda_device_count() > 0; }

std::shared_ptr<float> allocate_floats(size_t count, Device device) {
    if (device == Device::CPU) return allocate_cpu(count);
    size_t block = 0;
    void* p = allocator().allocate(count * sizeof(float), &block);
    return std::shared_ptr<float>(static_cast<float*>(p), [block](float* q) { allocator().release(q, block); });
}

void copy_floats(float* dst, Device dst_device, const float* src, Device src_device, size_t count) {
    if (count == 0 || dst == src) return;
    const size_t bytes = count * sizeof(float);
    if (dst_device == Device::CPU && src_device == Device::CPU) {
        std::memmove(dst, src, bytes);
    } else if (dst_device == Device::CUDA && src_device == Device::CUDA) {
        RT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
    } else {
        // Synchronous with respect to the host and ordered after all earlier work on the default stream.
        RT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    }
}

void fill_floats(float* dst, Device device, float value, size_t count) {
    if (device == Device::CPU) {
        std::fill(dst, dst + count, value);
        return;
    }
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if (bits == 0) {
        RT_CUDA_CHECK(cudaMemsetAsync(dst, 0, count * sizeof(float), 0));
    } else {
        cuda_check(cuda_detail::launch_fill(dst, value, count), "fill kernel launch");
    }
}

// ---- cuda_device.hpp ----

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // no driver / no device: not an error for the caller
        return 0;
    }
    return n;
}

int select_cuda_device(int local_rank) {
    const int n = cuda_device_count();
    if (n == 0) {
        const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
        throw Error(std::string("no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=") +
                    (vis ? vis : "<unset>") +
                    "); run on a GPU node (Slurm: --gpus-per-task=1 or --gpus-per-node) or set device to cpu");
    }
    const int dev = (local_rank < 0 ? 0 : local_rank) % n;
    RT_CUDA_CHECK(cudaSetDevice(dev));
    return dev;
}

std::string cuda_device_description() {
    int dev = 0;
    RT_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
    return std::string(prop.name) + " (cuda:" + std::to_string(dev) + ", sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + mem + ")";
}

std::string cuda_pci_bus_id() {
    int dev = 0;
    RT_CUDA_CHECK(cudaGetDevice(&dev));
    char id[32] = {};
    RT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, dev));
    return id;
}

CudaAllocatorStats cuda_allocator_stats() { return allocator().stats(); }

void cuda_empty_cache() { allocator().empty_cache(); }

void cuda_synchronize() { RT_CUDA_CHECK(cudaDeviceSynchronize()); }
void cuda_synchronize_default_stream() { RT_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy)); }

PinnedBuffer::~PinnedBuffer() {
    // Unwinding after a failure: cudaFreeHost synchronises the device, which may wait for a collective that never
    // ends (a peer gone) before this rank reports; the memory goes with the process.
    if (std::uncaught_exceptions() > 0) return;
    if (data_ != nullptr) (void)cudaFreeHost(data_);
}

void PinnedBuffer::reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    if (data_ != nullptr) {
        RT_CUDA_CHECK(cudaFreeHost(data_));
        data_ = nullptr;
        bytes_ = 0;
    }
    RT_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
    bytes_ = bytes;
}

}  // namespace ringtrain
