// Serial references for collective tests: every rank can generate every rank's random input from seeds, so the
// exact reductions (in double) are computable locally, without trusting any collective.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/mpi_job.hpp"
#include "ringtrain/core/rng.hpp"

namespace rt_test {

using ringtrain::Rng;

inline std::vector<float> rank_data(size_t count, int rank, uint64_t seed) {
    Rng rng(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + 17u);
    std::vector<float> v(count);
    for (auto& x : v) x = rng.uniform(-1.0f, 1.0f) * (1.0f + 3.0f * rng.uniform());
    return v;
}

// The exact reductions of every rank's data (computed in double), and this rank's own input.
struct Reference {
    std::vector<float> mine;
    std::vector<double> sum, sum_abs;
    std::vector<float> max, min;
};

inline Reference make_reference(size_t count, uint64_t seed) {
    const int n = world_size(), me = world_rank();
    Reference ref;
    ref.sum.assign(count, 0.0);
    ref.sum_abs.assign(count, 0.0);
    ref.max.assign(count, -std::numeric_limits<float>::infinity());
    ref.min.assign(count, std::numeric_limits<float>::infinity());
    for (int k = 0; k < n; ++k) {
        std::vector<float> v = rank_data(count, k, seed);
        for (size_t i = 0; i < count; ++i) {
            ref.sum[i] += v[i];
            ref.sum_abs[i] += std::fabs(v[i]);
            ref.max[i] = std::max(ref.max[i], v[i]);
            ref.min[i] = std::min(ref.min[i], v[i]);
        }
        if (k == me) ref.mine = std::move(v);
    }
    return ref;
}

}  // namespace rt_test
