// Private to src/ops/cuda: launchers of the image-layer kernels (image_kernels.cu) — average pooling, global average
// pooling, and the evaluation-mode BatchNorm pieces cuDNN has no call for. Same conventions as kernels.hpp: raw
// device pointers, the legacy default stream, the launch's cudaError_t returned as an int.
#pragma once

#include <cstdint>

namespace ringtrain::ops::cuda::kernels {

// x [NC planes of H x W] -> y [NC planes of P x Q]; every window sum divided by kh*kw (padding counts, as the CPU op).
struct PoolGeometry {
    int64_t planes, H, W, P, Q, kh, kw, sh, sw, ph, pw;
};
int avgpool2d_forward(const float* x, float* y, const PoolGeometry& g);
// dx[h, w] = sum over the windows that hold (h, w) of dy / (kh*kw): a gather per input element, no atomics.
int avgpool2d_backward(const float* dy, float* dx, const PoolGeometry& g);

// y[i] = mean of plane i (S values), summed in double as on the CPU; dx = dy[i] / S over plane i.
int global_avgpool_forward(const float* x, float* y, int64_t planes, int64_t S);
int global_avgpool_backward(const float* dy, float* dx, int64_t planes, int64_t S);

// Evaluation-mode BatchNorm on x [N, C, S]: mean = running_mean, inv_std = 1/sqrt(running_var + eps).
int batchnorm_eval_stats(const float* running_mean, const float* running_var, float* mean, float* inv_std, int64_t C,
                         float eps);
// With constant statistics: dgamma (+)= sum dy * xhat, dbeta (+)= sum dy (one block per channel, double sums);
// dx = gamma * inv_std * dy (skipped when dx is null).
int batchnorm_eval_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                            const float* inv_std, float* dx, float* dgamma, float* dbeta, int64_t N, int64_t C,
                            int64_t S, bool accumulate);

}  // namespace ringtrain::ops::cuda::kernels
