#include "ringtrain/ops/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "cpu/cpu_ops.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::ops {

namespace {
std::atomic<int> g_threads{1};
}

void set_intra_op_threads(int n) {
    if (n < 1) throw InputError("intra-op thread count must be at least 1, got " + std::to_string(n));
    g_threads.store(n);
    cpu::apply_threads(n);
}

int intra_op_threads() { return g_threads.load(std::memory_order_relaxed); }

int usable_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace ringtrain::ops
