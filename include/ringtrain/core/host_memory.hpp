// Huge-page blocks for the few large host buffers that are touched at random or refilled all the time: a sparse
// model's per-feature scratch (4 MiB at 2^20 features) and a sparse file's read buffer. A block of 2 MiB or more
// starts on a 2 MiB boundary, is a whole number of 2 MiB, and is advised MADV_HUGEPAGE, so the kernel backs it with
// transparent huge pages where it allows them (Debian's default THP mode is "madvise"):
//   - one page fault per 2 MiB instead of 512, at ~9 µs a fault on the KVM guests we measured;
//   - random reads and writes into a 1M-feature table stay within a handful of TLB entries.
// Not for tensors in general: advised, the dense CPU models' buffers made the MNIST CNN ~10 % slower (the advice,
// not the alignment). bench/RESULTS.md, "Huge pages for the sparse path's large buffers". Smaller blocks are plain
// 64-byte aligned allocations. RINGTRAIN_HUGE_PAGES=0 turns the advice off (to measure without it).
#pragma once

#include <cstddef>
#include <limits>
#include <new>

namespace ringtrain {

// At least `bytes` (64-byte aligned; see above for large blocks). Throws std::bad_alloc. Free with
// free_huge_page_block.
void* allocate_huge_page_block(size_t bytes);
void free_huge_page_block(void* p) noexcept;

// Blocks from allocate_huge_page_block at or above this size are 2 MiB aligned and huge-page advised.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// std::vector<T, HugePageAllocator<T>>: a container whose buffer comes from allocate_huge_page_block.
template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
    T* allocate(size_t n) {
        if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_alloc();
        return static_cast<T*>(allocate_huge_page_block(n * sizeof(T)));
    }
    void deallocate(T* p, size_t) noexcept { free_huge_page_block(p); }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace ringtrain
