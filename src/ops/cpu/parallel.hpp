// Private to src/ops/cpu: an OpenMP loop that costs nothing when the intra-op thread count is 1.
#pragma once

#include <cstdint>

#include "ringtrain/ops/threads.hpp"

namespace ringtrain::ops::cpu {

template <class F>
void parallel_for(int64_t n, F&& f) {
#ifdef _OPENMP
    const int nt = intra_op_threads();
    if (nt > 1 && n > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < n; ++i) f(i);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace ringtrain::ops::cpu
