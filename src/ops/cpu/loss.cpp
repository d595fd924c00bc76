// CPU softmax cross-entropy and sigmoid binary cross-entropy (numerically stable forms).
#include <cmath>
#include <string>

#include "cpu_ops.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::ops::cpu {

namespace {
int64_t class_index(float label, int64_t K, int64_t row) {
    const int64_t c = static_cast<int64_t>(label);
    if (!(label >= 0.0f) || !(label < static_cast<float>(K)) || static_cast<float>(c) != label)
        throw InputError("softmax cross-entropy: label " + std::to_string(label) + " of sample " + std::to_string(row) +
                         " is not a class index in [0, " + std::to_string(K) + ")");
    return c;
}

void check_target(float t, int64_t row) {
    if (!(t >= 0.0f && t <= 1.0f))
        throw InputError("binary cross-entropy: target " + std::to_string(t) + " of sample " + std::to_string(row) +
                         " is not in [0, 1]");
}
}  // namespace

LossStats softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs) {
    const int64_t N = logits.dim(0), K = logits.dim(1);
    const float* z = logits.data();
    const float* lab = labels.data();
    float* pr = probs.data();
    LossStats st;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t c = class_index(lab[n], K, n);
        const float* zr = z + n * K;
        float* pn = pr + n * K;
        int64_t arg = 0;
        for (int64_t k = 1; k < K; ++k)
            if (zr[k] > zr[arg]) arg = k;
        const float m = zr[arg];
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            pn[k] = std::exp(zr[k] - m);
            sum += pn[k];
        }
        const float inv = 1.0f / sum;
        for (int64_t k = 0; k < K; ++k) pn[k] *= inv;
        // -log softmax_c = log(sum exp(z - m)) - (z_c - m)
        st.loss_sum += std::log(static_cast<double>(sum)) - (static_cast<double>(zr[c]) - m);
        st.correct += arg == c;
    }
    return st;
}

void softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, float scale) {
    const int64_t N = probs.dim(0), K = probs.dim(1);
    const float* pr = probs.data();
    const float* lab = labels.data();
    float* d = dlogits.data();
    for (int64_t n = 0; n < N; ++n) {
        const int64_t c = class_index(lab[n], K, n);
        for (int64_t k = 0; k < K; ++k) d[n * K + k] = pr[n * K + k] * scale;
        d[n * K + c] -= scale;
    }
}

LossStats sigmoid_bce_forward(const Tensor& logits, const Tensor& targets, Tensor& probs) {
    const int64_t N = logits.numel();
    const float* z = logits.data();
    const float* t = targets.data();
    float* pr = probs.data();
    LossStats st;
    for (int64_t n = 0; n < N; ++n) {
        check_target(t[n], n);
        const float x = z[n];
        const float e = std::exp(-std::fabs(x));  // in (0, 1]
        pr[n] = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        st.loss_sum += static_cast<double>(std::max(x, 0.0f)) - static_cast<double>(x) * t[n] +
                       std::log1p(static_cast<double>(e));
        st.correct += (x > 0.0f) == (t[n] >= 0.5f);
    }
    return st;
}

void sigmoid_bce_backward(const Tensor& probs, const Tensor& targets, Tensor& dlogits, float scale) {
    const int64_t N = probs.numel();
    const float* pr = probs.data();
    const float* t = targets.data();
    float* d = dlogits.data();
    for (int64_t n = 0; n < N; ++n) {
        check_target(t[n], n);
        d[n] = (pr[n] - t[n]) * scale;
    }
}

}  // namespace ringtrain::ops::cpu
