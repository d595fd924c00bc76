// CPU optimizer updates, written as single fused loops (one pass over each tensor).
#include <cmath>

#include "cpu_ops.hpp"

namespace ringtrain::ops::cpu {

void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
    float* w = param.data();
    const float* g = grad.data();
    const int64_t n = param.numel();
    const float lr = p.lr, wd = p.weight_decay, mu = p.momentum;
    if (mu == 0.0f) {
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
        return;
    }
    float* v = velocity.data();
    if (p.nesterov) {
        for (int64_t i = 0; i < n; ++i) {
            const float gi = g[i] + wd * w[i];
            v[i] = mu * v[i] + gi;
            w[i] -= lr * (gi + mu * v[i]);
        }
    } else {
        for (int64_t i = 0; i < n; ++i) {
            const float gi = g[i] + wd * w[i];
            v[i] = mu * v[i] + gi;
            w[i] -= lr * v[i];
        }
    }
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p) {
    // As torch.optim.Adam (single-tensor path): bias corrections computed in double, then
    // param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
    const float step_size = static_cast<float>(p.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, wd = p.weight_decay;
    float* w = param.data();
    const float* g = grad.data();
    float* pm = m.data();
    float* pv = v.data();
    const int64_t n = param.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * w[i];
        pm[i] = b1 * pm[i] + (1.0f - b1) * gi;
        pv[i] = b2 * pv[i] + (1.0f - b2) * gi * gi;
        const float denom = std::sqrt(pv[i]) / bc2_sqrt + eps;
        w[i] -= step_size * (pm[i] / denom);
    }
}

void adadelta_update(Tensor& param, const Tensor& grad, Tensor& sq_avg, Tensor& acc_delta, const AdadeltaParams& p) {
    const float rho = p.rho, eps = p.eps, wd = p.weight_decay, lr = p.lr;
    float* w = param.data();
    const float* g = grad.data();
    float* sq = sq_avg.data();
    float* acc = acc_delta.data();
    const int64_t n = param.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * w[i];
        sq[i] = rho * sq[i] + (1.0f - rho) * gi * gi;
        const float d = std::sqrt(acc[i] + eps) / std::sqrt(sq[i] + eps) * gi;
        acc[i] = rho * acc[i] + (1.0f - rho) * d * d;
        w[i] -= lr * d;
    }
}

}  // namespace ringtrain::ops::cpu
