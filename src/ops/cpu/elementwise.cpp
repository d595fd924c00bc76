// CPU activations and dropout (Eigen arrays for vectorised exp/tanh).
#include <Eigen/Core>
#include <algorithm>

#include "cpu_ops.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::ops::cpu {

namespace {
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;
}  // namespace

void activation_forward(Activation a, const Tensor& x, Tensor& y) {
    ConstArrayMap in(x.data(), x.numel());
    ArrayMap out(y.data(), y.numel());
    switch (a) {
        case Activation::ReLU: out = in.max(0.0f); break;
        case Activation::Sigmoid: out = in.logistic(); break;
        case Activation::Tanh: out = in.tanh(); break;
    }
}

void activation_backward(Activation a, const Tensor& y, const Tensor& dy, Tensor& dx) {
    ConstArrayMap yv(y.data(), y.numel());
    ConstArrayMap g(dy.data(), dy.numel());
    ArrayMap out(dx.data(), dx.numel());  // may alias dy: every expression below is coefficient-wise
    switch (a) {
        case Activation::ReLU: out = (yv > 0.0f).select(g, 0.0f); break;
        case Activation::Sigmoid: out = g * yv * (1.0f - yv); break;
        case Activation::Tanh: out = g * (1.0f - yv * yv); break;
    }
}

void dropout_forward(const Tensor& x, Tensor& y, Tensor& mask, float p, Rng& rng) {
    const float keep_scale = 1.0f / (1.0f - p);
    float* m = mask.data();
    const int64_t n = x.numel();
    if (p == 0.0f) {
        std::fill(m, m + n, 1.0f);
    } else {
        // Counter-based, as the CUDA kernel (kernels.cu, dropout_fwd_kernel): one draw from rng seeds the call and
        // element i keeps by dropout_keeps (core/hash.hpp), the same function on both devices, so the same Rng state
        // gives the same mask. With no chain through the generator's state the elements pipeline (bench/RESULTS.md,
        // "Measurements moved out of code comments").
        const uint64_t seed = rng.next_u64();
        const uint32_t threshold = dropout_threshold(p);
        for (int64_t i = 0; i < n; ++i)
            m[i] = keep_scale * static_cast<float>(dropout_keeps(seed, static_cast<uint64_t>(i), threshold));
    }
    ArrayMap(y.data(), n) = ConstArrayMap(x.data(), n) * ConstArrayMap(m, n);
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    const int64_t n = dy.numel();
    ArrayMap(dx.data(), n) = ConstArrayMap(dy.data(), n) * ConstArrayMap(mask.data(), n);
}

}  // namespace ringtrain::ops::cpu
