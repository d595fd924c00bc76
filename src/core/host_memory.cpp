#include "ringtrain/core/host_memory.hpp"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

namespace ringtrain {

namespace {

constexpr size_t kAlignment = 64;  // a cache line, and enough for AVX-512 loads

bool huge_pages_wanted() {
    // Read once: the advice is a property of the process, not of each allocation.
    static const bool wanted = [] {
        const char* v = std::getenv("RINGTRAIN_HUGE_PAGES");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return wanted;
}

}  // namespace

void* allocate_huge_page_block(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes >= kHugePageBytes && huge_pages_wanted()) {
        const size_t whole = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
        void* p = std::aligned_alloc(kHugePageBytes, whole);
        if (p == nullptr) throw std::bad_alloc();
        // Advice only: a kernel without THP (or with it set to "never") says no, and the block works as it is.
        (void)madvise(p, whole, MADV_HUGEPAGE);
        return p;
    }
    void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void free_huge_page_block(void* p) noexcept { std::free(p); }

}  // namespace ringtrain
