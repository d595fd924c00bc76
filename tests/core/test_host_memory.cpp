#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/core/host_memory.hpp"

using namespace ringtrain;

namespace {

// The VmFlags of the mapping that holds `p` in /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream range(line);
        if (range >> std::hex >> lo >> dash >> hi && dash == '-') {
            inside = lo <= at && at < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) return line;
    }
    return "";
}

bool kernel_has_thp() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

}  // namespace

TEST_CASE("small huge-page blocks are plain cache-line aligned allocations", "[core]") {
    for (size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, size_t{1} << 20}) {
        void* p = allocate_huge_page_block(bytes);
        REQUIRE(reinterpret_cast<uintptr_t>(p) % 64 == 0);
        std::memset(p, 0xAB, bytes);
        free_huge_page_block(p);
    }
}

TEST_CASE("large huge-page blocks start on a 2 MiB boundary and are advised MADV_HUGEPAGE", "[core]") {
    const size_t bytes = 3 * kHugePageBytes + 12345;
    auto* p = static_cast<unsigned char*>(allocate_huge_page_block(bytes));
    REQUIRE(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
    std::memset(p, 1, bytes);
    REQUIRE(p[bytes - 1] == 1);
    if (kernel_has_thp()) {
        INFO("VmFlags of the block: " << vm_flags_of(p));
        REQUIRE(vm_flags_of(p).find(" hg") != std::string::npos);
    } else {
        WARN("this kernel has no transparent huge pages: the MADV_HUGEPAGE check is skipped");
    }
    free_huge_page_block(p);
}

TEST_CASE("HugePageAllocator vectors take large buffers from huge-page blocks", "[core]") {
    std::vector<float, HugePageAllocator<float>> v(size_t{1} << 20, 2.0f);  // 4 MiB
    REQUIRE(reinterpret_cast<uintptr_t>(v.data()) % kHugePageBytes == 0);
    REQUIRE(v.back() == 2.0f);
    if (kernel_has_thp()) REQUIRE(vm_flags_of(v.data()).find(" hg") != std::string::npos);
    std::vector<float, HugePageAllocator<float>> small(10, 1.0f);
    REQUIRE(reinterpret_cast<uintptr_t>(small.data()) % 64 == 0);
}
