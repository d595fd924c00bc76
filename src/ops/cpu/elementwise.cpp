// CPU activations and dropout (Eigen arrays for vectorised exp/tanh).
#include <Eigen/Core>
#include <cmath>

#include "cpu_ops.hpp"

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
        // element i keeps when splitmix64(seed ^ i·φ) has its top 24 bits >= ceil(p·2^24), i.e. when the uniform
        // k·2^-24 >= p. The same Rng state therefore gives the same mask on both devices, and with no chain through
        // the generator's state the elements pipeline (4 ns -> ~1 ns each here).
        const uint64_t seed = rng.next_u64();
        const uint64_t threshold = static_cast<uint64_t>(std::ceil(static_cast<double>(p) * 16777216.0));
        for (int64_t i = 0; i < n; ++i) {
            uint64_t z = (seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)) + 0x9E3779B97F4A7C15ull;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            m[i] = keep_scale * static_cast<float>((z >> 40) >= threshold);
        }
    }
    ArrayMap(y.data(), n) = ConstArrayMap(x.data(), n) * ConstArrayMap(m, n);
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    const int64_t n = dy.numel();
    ArrayMap(dx.data(), n) = ConstArrayMap(dy.data(), n) * ConstArrayMap(mask.data(), n);
}

}  // namespace ringtrain::ops::cpu
