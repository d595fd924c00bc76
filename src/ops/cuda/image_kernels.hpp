// Private to src/ops/cuda: launchers of the image-layer kernels (image_kernels.cu) — average pooling, global average
// pooling, and the BatchNorm pieces cuDNN has no call for (evaluation-mode backward, synchronised BatchNorm). Same
// conventions as kernels.hpp: raw device pointers, the legacy default stream, the launch's cudaError_t returned as
// an int.
#pragma once

#include <cstddef>
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

// ---- synchronised BatchNorm (batchnorm_across.cpp) on x [N, C, S] ----
// Per-channel sums in double, the CPU op's terms exactly: each channel's N*S values are cut into slices, one block
// per (channel, slice) writes a partial sum into `scratch`, then one thread per channel adds its partials in slice
// order. The slicing depends on the shape only, so the sums are deterministic on any GPU. `scratch` holds
// bn_reduce_scratch_doubles(N, C, S) doubles.
size_t bn_reduce_scratch_doubles(int64_t N, int64_t C, int64_t S);
// sums[c] = sum of x over channel c.
int bn_channel_sums(const float* x, double* sums, int64_t N, int64_t C, int64_t S, double* scratch);
// squares[c] = sum of (x - mu[c])^2 over channel c.
int bn_channel_centred_squares(const float* x, const double* mu, double* squares, int64_t N, int64_t C, int64_t S,
                               double* scratch);
// From the global mean mu[c] and centred square sum ss[c] of m values: mean = mu, inv_std = 1/sqrt(ss/m + eps),
// running = (1 - momentum) running + momentum * (mu, ss/(m-1)), and y's per-channel scale = gamma * inv_std and
// shift = beta - gamma * inv_std * mu (all in double, rounded once to float, as the CPU op).
int bn_apply_global_stats(const double* mu, const double* ss, double m, float eps, float momentum, const float* gamma,
                          const float* beta, float* mean, float* inv_std, float* running_mean, float* running_var,
                          float* scale, float* shift, int64_t C);
// y = x * scale[c] + shift[c].
int bn_scale_shift(const float* x, float* y, const float* scale, const float* shift, int64_t N, int64_t C,
                   int64_t S);
// sums[c] = sum dy, sums[C + c] = sum dy * xhat (xhat = (x - mean) * inv_std) over channel c; and this rank's
// parameter gradients from them: dbeta[c] (+)= sums[c], dgamma[c] (+)= sums[C + c].
int bn_gradient_sums(const float* x, const float* dy, const float* mean, const float* inv_std, double* sums,
                     float* dgamma, float* dbeta, int64_t N, int64_t C, int64_t S, bool accumulate, double* scratch);
// dx = gamma * inv_std * (dy - means[c] - xhat * means[C + c]), in double: means = every rank's mean dy and mean
// dy * xhat.
int bn_input_gradient(const float* x, const float* dy, const float* gamma, const float* mean, const float* inv_std,
                      const double* means, float* dx, int64_t N, int64_t C, int64_t S);

}  // namespace ringtrain::ops::cuda::kernels
