// Helpers shared by GradientSync's host path (gradient_sync.cpp) and device path (gradient_sync_nccl.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ringtrain::sync::detail {

inline double mono_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double mib(size_t floats) { return static_cast<double>(floats) * sizeof(float) / (1024.0 * 1024.0); }

// The stall warning's text (both paths print the same line, which scripts and tests match).
inline std::string stall_text(size_t bucket, size_t floats, int64_t step, double seconds) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "allreduce of bucket %zu (%.2f MiB, step %lld) has not completed after %.1f s", bucket,
                  mib(floats), static_cast<long long>(step), seconds);
    return buf;
}

// The abort's message: the same text and the limit that ran out.
inline std::string stall_abort_text(size_t bucket, size_t floats, int64_t step, double seconds, double limit_s) {
    char limit[64];
    std::snprintf(limit, sizeof limit, "%g", limit_s);
    return stall_text(bucket, floats, step, seconds) + "; aborting the job (sync.stall_abort_s = " + limit + ")";
}

// The warning line, printed once per stalled collective.
inline void print_stall_warning(int rank, size_t bucket, size_t floats, int64_t step, double seconds) {
    std::fprintf(stderr, "ringtrain: rank %d: warning: %s; a rank may be stuck or dead\n", rank,
                 stall_text(bucket, floats, step, seconds).c_str());
    std::fflush(stderr);
}

}  // namespace ringtrain::sync::detail
