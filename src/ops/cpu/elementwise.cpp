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
        // A local copy keeps the generator's state in registers (through rng the compiler must reload and store it
        // around every mask write): the same stream, about 3x faster.
        Rng local = rng;
        // keep_scale × (0 or 1), not a conditional: kept or dropped is a coin flip, and as a branch it mispredicts.
        // uniform() >= p compared as integers: uniform() is k·2^-24 for the top 24 bits k, and k·2^-24 >= p exactly
        // when k >= ceil(p·2^24) (p·2^24 is exact in double), so the mask is bit for bit the same.
        const uint64_t threshold = static_cast<uint64_t>(std::ceil(static_cast<double>(p) * 16777216.0));
        for (int64_t i = 0; i < n; ++i) m[i] = keep_scale * static_cast<float>((local.next_u64() >> 40) >= threshold);
        rng = local;
    }
    ArrayMap(y.data(), n) = ConstArrayMap(x.data(), n) * ConstArrayMap(m, n);
}

void dropout_backward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
    const int64_t n = dy.numel();
    ArrayMap(dx.data(), n) = ConstArrayMap(dy.data(), n) * ConstArrayMap(mask.data(), n);
}

}  // namespace ringtrain::ops::cpu
