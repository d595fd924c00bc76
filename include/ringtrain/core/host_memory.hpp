// Host memory for the large, long-lived buffers (tensors, a sparse model's per-feature tables and scratch).
// A block of 2 MiB or more starts on a 2 MiB boundary, is a whole number of 2 MiB, and is advised MADV_HUGEPAGE, so
// the kernel backs it with transparent huge pages where it allows them (Debian's default THP mode is "madvise"):
//   - one page fault per 2 MiB instead of 512, at ~9 µs a fault on the KVM guests we measured;
//   - random reads and writes into a 1M-feature table (weights, AdaGrad sums, gradient scratch: 4 MiB each) stay
//     within a handful of TLB entries instead of thousands.
// bench/RESULTS.md, "Huge pages for the large host buffers", has the measurements. Smaller blocks are plain 64-byte
// aligned allocations. RINGTRAIN_HUGE_PAGES=0 turns the advice off (to measure without it).
#pragma once

#include <cstddef>
#include <limits>
#include <new>

namespace ringtrain {

// At least `bytes` (64-byte aligned; see above for large blocks). Throws std::bad_alloc. Free with free_host.
void* allocate_host(size_t bytes);
void free_host(void* p) noexcept;

// Blocks from allocate_host at or above this size are huge-page advised.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// std::vector<T, HostAllocator<T>>: a container whose buffer comes from allocate_host.
template <class T>
struct HostAllocator {
    using value_type = T;
    HostAllocator() = default;
    template <class U>
    HostAllocator(const HostAllocator<U>&) noexcept {}
    T* allocate(size_t n) {
        if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_alloc();
        return static_cast<T*>(allocate_host(n * sizeof(T)));
    }
    void deallocate(T* p, size_t) noexcept { free_host(p); }
    template <class U>
    bool operator==(const HostAllocator<U>&) const noexcept { return true; }
};

}  // namespace ringtrain
