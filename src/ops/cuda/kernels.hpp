// Private to src/ops/cuda: launchers of the own CUDA kernels (kernels.cu) on raw device pointers, callable from the
// C++20 sources without CUDA headers. Every launcher enqueues on the legacy default stream and returns the
// cudaError_t of the launch as an int (0 = success).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringtrain::ops::cuda::kernels {

// Device-side result of a loss or reduction, copied back to the host in one transfer.
struct ReduceResult {
    double sum;                   // loss sum / sum of squares
    unsigned long long count;     // correct predictions / non-finite elements
    unsigned long long first_bad;  // first sample with an invalid label or target (~0ull: none)
};

// act: 0 ReLU, 1 Sigmoid, 2 Tanh (the order of ops::Activation).
int activation_forward(int act, const float* x, float* y, size_t n);
int activation_backward(int act, const float* y, const float* dy, float* dx, size_t n);

// mask[i] = dropout_keeps(seed, i, dropout_threshold(p)) ? 1/(1-p) : 0 (core/hash.hpp, as on the CPU); y = x * mask.
int dropout_forward(const float* x, float* y, float* mask, size_t n, float p, uint64_t seed);
int multiply(const float* a, const float* b, float* out, size_t n);  // out = a * b (may alias)

// y is [N, K, S] (S = product of the spatial dims, 1 for [N, K]).
int bias_add(float* y, const float* bias, int64_t N, int64_t K, int64_t S);
// Two passes (column partials over row slices, then a fixed-order sum per channel): deterministic, and enough
// blocks to fill the GPU whatever K is. `scratch` holds bias_grad_scratch_floats(N, K, S) floats.
size_t bias_grad_scratch_floats(int64_t N, int64_t K, int64_t S);
int bias_grad(const float* dy, float* dbias, int64_t N, int64_t K, int64_t S, bool accumulate, float* scratch);

int scale(float* x, float alpha, size_t n);
int axpy(float alpha, const float* x, float* y, size_t n);
// res must be zeroed (first_bad set to ~0) before: res->sum += sum x^2, res->count += non-finite elements.
int sum_squares_and_nonfinite(const float* x, size_t n, ReduceResult* res, bool want_sum);

// Zeroes *res and sets first_bad to ~0 (async).
int reset_result(ReduceResult* res);

int softmax_ce_forward(const float* logits, const float* labels, float* probs, int64_t N, int64_t K,
                       ReduceResult* res);
int softmax_ce_backward(const float* probs, const float* labels, float* dlogits, int64_t N, int64_t K, float scale);
int sigmoid_bce_forward(const float* logits, const float* targets, float* probs, int64_t N, ReduceResult* res);
int sigmoid_bce_backward(const float* probs, const float* targets, float* dlogits, int64_t N, float scale);

int sgd_update(float* w, const float* g, float* v, size_t n, float lr, float momentum, float wd, bool nesterov);
int adam_update(float* w, const float* g, float* m, float* v, size_t n, float step_size, float bc2_sqrt, float b1,
                float b2, float eps, float wd);
int adadelta_update(float* w, const float* g, float* sq, float* acc, size_t n, float lr, float rho, float eps,
                    float wd);

}  // namespace ringtrain::ops::cuda::kernels
