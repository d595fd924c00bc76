// Element-wise reductions shared by the ring and shared-memory allreduces (private to the comm layer).
// Plain loops over restrict pointers so the compiler vectorises them (addps/maxps/minps).
#pragma once

#include <cstddef>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm::detail {

inline void reduce_sum(float* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}
inline void reduce_max(float* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = dst[i] > src[i] ? dst[i] : src[i];
}
inline void reduce_min(float* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = dst[i] < src[i] ? dst[i] : src[i];
}

// Average combines as Sum: the caller scales.
inline void reduce_into(float* dst, const float* src, size_t n, ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Average: reduce_sum(dst, src, n); break;
        case ReduceOp::Max: reduce_max(dst, src, n); break;
        case ReduceOp::Min: reduce_min(dst, src, n); break;
    }
}

inline void scale(float* __restrict p, size_t n, float factor) {
    for (size_t i = 0; i < n; ++i) p[i] *= factor;
}

}  // namespace ringtrain::comm::detail
