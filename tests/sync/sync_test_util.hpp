// Shared helpers for the sync tests: a small parameter set with per-rank random gradients, and MPI rank/size.
#pragma once

#include <mpi.h>

#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/serial_reference.hpp"
#include "ringtrain/core/rng.hpp"
#include "ringtrain/nn/layer.hpp"

namespace sync_test {

using rt_test::world_rank;
using rt_test::world_size;

// Parameters shaped like a small CNN's (weights and biases of mixed sizes, including one large tensor).
struct ParamSet {
    std::vector<std::unique_ptr<ringtrain::nn::Parameter>> owned;
    std::vector<ringtrain::nn::Parameter*> ptrs;

    explicit ParamSet(const std::vector<ringtrain::Shape>& shapes = default_shapes()) {
        for (size_t i = 0; i < shapes.size(); ++i) {
            auto p = std::make_unique<ringtrain::nn::Parameter>();
            p->name = std::to_string(i);
            p->name.insert(p->name.begin(), 'p');  // not "p" + ...: GCC 12 warns falsely (-Wrestrict) there
            p->value = ringtrain::Tensor::zeros(shapes[i]);
            p->grad = ringtrain::Tensor::zeros(shapes[i]);
            ptrs.push_back(p.get());
            owned.push_back(std::move(p));
        }
    }
    static std::vector<ringtrain::Shape> default_shapes() {
        return {{8, 1, 3, 3}, {8}, {16, 8, 3, 3}, {16}, {300, 64}, {64}, {10, 64}, {10}, {1}, {70001}};
    }
    size_t total() const {
        size_t n = 0;
        for (auto* p : ptrs) n += static_cast<size_t>(p->grad.numel());
        return n;
    }
};

// The gradient rank `rank` holds for parameter `i` at `step`.
inline std::vector<float> grad_values(size_t count, int rank, int64_t step, size_t i, uint64_t seed) {
    ringtrain::Rng rng(seed * 1000003u + static_cast<uint64_t>(step) * 7919u + i * 104729u + static_cast<uint64_t>(rank) * 31u + 1);
    std::vector<float> v(count);
    for (auto& x : v) x = rng.normal() * 0.01f;
    return v;
}

inline void fill_grads(ParamSet& ps, int rank, int64_t step, uint64_t seed) {
    for (size_t i = 0; i < ps.ptrs.size(); ++i) {
        auto v = grad_values(static_cast<size_t>(ps.ptrs[i]->grad.numel()), rank, step, i, seed);
        std::copy(v.begin(), v.end(), ps.ptrs[i]->grad.data());
    }
}

inline uint64_t fnv1a(std::span<const float> v, uint64_t h = 1469598103934665603ull) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

inline uint64_t grad_hash(const ParamSet& ps) {
    uint64_t h = 1469598103934665603ull;
    for (auto* p : ps.ptrs) h = fnv1a(p->grad.span(), h);
    return h;
}

}  // namespace sync_test
