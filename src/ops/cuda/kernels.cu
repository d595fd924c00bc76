// The own CUDA kernels of the ops backend: activations, dropout, bias, vector ops, losses and optimizer updates.
// Kept in one translation unit so the CUDA build stays quick (two architectures, sm_80 and sm_90).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::ops::cuda::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    if (b < 1) b = 1;
    if (b > 8192) b = 8192;  // grid-stride loops cover the rest
    return static_cast<unsigned>(b);
}

int last_error() { return static_cast<int>(cudaGetLastError()); }

#define RT_GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
         i += static_cast<size_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- activations, dropout, elementwise ----

// Not __restrict__: called in place (y == x) after a convolution or BatchNorm.
__global__ void act_fwd_kernel(int act, const float* x, float* y, size_t n) {
    RT_GRID_LOOP(i, n) {
        const float v = x[i];
        y[i] = act == 0 ? fmaxf(v, 0.0f) : act == 1 ? 1.0f / (1.0f + expf(-v)) : tanhf(v);
    }
}

__global__ void act_bwd_kernel(int act, const float* y, const float* dy, float* dx, size_t n) {
    RT_GRID_LOOP(i, n) {
        const float yv = y[i], g = dy[i];
        dx[i] = act == 0 ? (yv > 0.0f ? g : 0.0f) : act == 1 ? g * yv * (1.0f - yv) : g * (1.0f - yv * yv);
    }
}

// The mask of the CPU op, bit for bit: both decide each element with dropout_keeps (core/hash.hpp).
__global__ void dropout_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                                   size_t n, uint32_t threshold, float keep_scale, uint64_t seed) {
    RT_GRID_LOOP(i, n) {
        const float m = dropout_keeps(seed, i, threshold) ? keep_scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

__global__ void mul_kernel(const float* a, const float* b, float* out, size_t n) {
    RT_GRID_LOOP(i, n) out[i] = a[i] * b[i];
}

// Bias over [N, L] with L = K*S: a thread owns columns j (so bias index j / S is computed once, not per element) and
// walks the rows n of its blockIdx.y slice; coalesced along j. No 64-bit division per element.
struct BiasGrid {
    unsigned x, y;
};
BiasGrid bias_grid(int64_t N, int64_t L) {
    int64_t gx = (L + kThreads - 1) / kThreads;
    if (gx > 4096) gx = 4096;
    int64_t gy = (1024 + gx - 1) / gx;      // about 1024 blocks in all, to fill the GPU
    const int64_t rows_cap = (N + 15) / 16;  // but at least ~16 rows per block
    if (gy > rows_cap) gy = rows_cap;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    return {static_cast<unsigned>(gx), static_cast<unsigned>(gy)};
}

__global__ void bias_add_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t N, int64_t L,
                                int64_t S) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < L;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float b = bias[j / S];
        for (int64_t n = blockIdx.y; n < N; n += gridDim.y) y[n * L + j] += b;
    }
}

// First pass: partial[c * L + j] = sum of dy[n, j] over the rows n of slice c (= blockIdx.y).
__global__ void bias_grad_partial_kernel(const float* __restrict__ dy, float* __restrict__ partial, int64_t N,
                                         int64_t L) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < L;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float acc = 0.0f;
        for (int64_t n = blockIdx.y; n < N; n += gridDim.y) acc += dy[n * L + j];
        partial[blockIdx.y * L + j] = acc;
    }
}

// Second pass, one block per channel k: the S x C partials of k in a fixed order (deterministic).
__global__ void bias_grad_final_kernel(const float* __restrict__ partial, float* __restrict__ dbias, int64_t L,
                                       int64_t S, int64_t C, bool accumulate) {
    const int64_t k = blockIdx.x;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < S * C; i += blockDim.x) {
        const int64_t c = i / S, s = i - c * S;
        acc += partial[c * L + k * S + s];
    }
    __shared__ float part[kThreads / 32];
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0) dbias[k] = accumulate ? dbias[k] + v : v;
    }
}

__global__ void scale_kernel(float* x, float a, size_t n) {
    RT_GRID_LOOP(i, n) x[i] *= a;
}

__global__ void axpy_kernel(float a, const float* __restrict__ x, float* __restrict__ y, size_t n) {
    RT_GRID_LOOP(i, n) y[i] += a * x[i];
}

__global__ void sumsq_kernel(const float* __restrict__ x, size_t n, ReduceResult* res, bool want_sum) {
    double acc = 0.0;
    unsigned long long bad = 0;
    RT_GRID_LOOP(i, n) {
        const float v = x[i];
        if (want_sum) acc += static_cast<double>(v) * v;
        bad += isfinite(v) ? 0 : 1;
    }
    if (want_sum) {
        acc = warp_sum(acc);
        if ((threadIdx.x & 31) == 0 && acc != 0.0) atomicAdd(&res->sum, acc);
    }
    if (bad) atomicAdd(&res->count, bad);
}

__global__ void reset_kernel(ReduceResult* res) {
    res->sum = 0.0;
    res->count = 0;
    res->first_bad = ~0ull;
}

// ---- losses: one warp per sample row ----

__global__ void softmax_ce_fwd_kernel(const float* __restrict__ z, const float* __restrict__ labels,
                                      float* __restrict__ probs, int64_t N, int64_t K, ReduceResult* res) {
    const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float* zr = z + row * K;
    float* pr = probs + row * K;
    // max and first argmax
    float m = -INFINITY;
    int64_t arg = K;
    for (int64_t k = lane; k < K; k += 32) {
        const float v = zr[k];
        if (arg == K || v > m) {  // strict: the first maximum in this lane's columns
            m = v;
            arg = k;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o);
        const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (oa != K && (arg == K || om > m || (om == m && oa < arg))) {
            m = om;
            arg = oa;
        }
    }
    float sum = 0.0f;
    for (int64_t k = lane; k < K; k += 32) {
        const float e = expf(zr[k] - m);
        pr[k] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int64_t k = lane; k < K; k += 32) pr[k] *= inv;
    if (lane == 0) {
        const float label = labels[row];
        const int64_t c = static_cast<int64_t>(label);
        if (!(label >= 0.0f) || !(label < static_cast<float>(K)) || static_cast<float>(c) != label) {
            atomicMin(&res->first_bad, static_cast<unsigned long long>(row));
            return;
        }
        atomicAdd(&res->sum, log(static_cast<double>(sum)) - (static_cast<double>(zr[c]) - m));
        if (arg == c) atomicAdd(&res->count, 1ull);
    }
}

__global__ void softmax_ce_bwd_kernel(const float* __restrict__ probs, const float* __restrict__ labels,
                                      float* __restrict__ d, int64_t N, int64_t K, float scale) {
    RT_GRID_LOOP(i, static_cast<size_t>(N * K)) {
        const int64_t n = static_cast<int64_t>(i) / K, k = static_cast<int64_t>(i) - n * K;
        const float label = labels[n];
        d[i] = probs[i] * scale - (static_cast<float>(k) == label ? scale : 0.0f);
    }
}

__global__ void sigmoid_bce_fwd_kernel(const float* __restrict__ z, const float* __restrict__ t,
                                       float* __restrict__ probs, int64_t N, ReduceResult* res) {
    double loss = 0.0;
    unsigned long long correct = 0;
    RT_GRID_LOOP(i, static_cast<size_t>(N)) {
        const float x = z[i], ti = t[i];
        const float e = expf(-fabsf(x));
        probs[i] = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        if (!(ti >= 0.0f && ti <= 1.0f)) {
            atomicMin(&res->first_bad, static_cast<unsigned long long>(i));
            continue;
        }
        loss += static_cast<double>(fmaxf(x, 0.0f)) - static_cast<double>(x) * ti + log1p(static_cast<double>(e));
        correct += (x > 0.0f) == (ti >= 0.5f);
    }
    loss = warp_sum(loss);
    for (int o = 16; o > 0; o >>= 1) correct += __shfl_xor_sync(0xffffffffu, correct, o);
    if ((threadIdx.x & 31) == 0) {
        if (loss != 0.0) atomicAdd(&res->sum, loss);
        if (correct) atomicAdd(&res->count, correct);
    }
}

__global__ void sigmoid_bce_bwd_kernel(const float* p, const float* t, float* d, int64_t N, float scale) {
    RT_GRID_LOOP(i, static_cast<size_t>(N)) d[i] = (p[i] - t[i]) * scale;
}

// ---- optimizers (PyTorch semantics, as the CPU versions) ----

__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, size_t n,
                           float lr, float mu, float wd, bool nesterov) {
    RT_GRID_LOOP(i, n) {
        const float gi = g[i] + wd * w[i];
        if (mu == 0.0f) {
            w[i] -= lr * gi;
        } else {
            const float vi = mu * v[i] + gi;
            v[i] = vi;
            w[i] -= lr * (nesterov ? gi + mu * vi : vi);
        }
    }
}

__global__ void adam_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, size_t n, float step_size, float bc2_sqrt, float b1, float b2,
                            float eps, float wd) {
    RT_GRID_LOOP(i, n) {
        const float gi = g[i] + wd * w[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        w[i] -= step_size * (mi / denom);
    }
}

__global__ void adadelta_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ sq,
                                float* __restrict__ acc, size_t n, float lr, float rho, float eps, float wd) {
    RT_GRID_LOOP(i, n) {
        const float gi = g[i] + wd * w[i];
        const float s = rho * sq[i] + (1.0f - rho) * gi * gi;
        sq[i] = s;
        const float d = sqrtf(acc[i] + eps) / sqrtf(s + eps) * gi;
        acc[i] = rho * acc[i] + (1.0f - rho) * d * d;
        w[i] -= lr * d;
    }
}

}  // namespace

int activation_forward(int act, const float* x, float* y, size_t n) {
    act_fwd_kernel<<<blocks_for(n), kThreads>>>(act, x, y, n);
    return last_error();
}
int activation_backward(int act, const float* y, const float* dy, float* dx, size_t n) {
    act_bwd_kernel<<<blocks_for(n), kThreads>>>(act, y, dy, dx, n);
    return last_error();
}
int dropout_forward(const float* x, float* y, float* mask, size_t n, float p, uint64_t seed) {
    dropout_fwd_kernel<<<blocks_for(n), kThreads>>>(x, y, mask, n, dropout_threshold(p), 1.0f / (1.0f - p), seed);
    return last_error();
}
int multiply(const float* a, const float* b, float* out, size_t n) {
    mul_kernel<<<blocks_for(n), kThreads>>>(a, b, out, n);
    return last_error();
}
int bias_add(float* y, const float* bias, int64_t N, int64_t K, int64_t S) {
    const BiasGrid g = bias_grid(N, K * S);
    bias_add_kernel<<<dim3(g.x, g.y), kThreads>>>(y, bias, N, K * S, S);
    return last_error();
}
size_t bias_grad_scratch_floats(int64_t N, int64_t K, int64_t S) {
    return static_cast<size_t>(bias_grid(N, K * S).y) * static_cast<size_t>(K * S);
}
int bias_grad(const float* dy, float* dbias, int64_t N, int64_t K, int64_t S, bool accumulate, float* scratch) {
    const BiasGrid g = bias_grid(N, K * S);
    bias_grad_partial_kernel<<<dim3(g.x, g.y), kThreads>>>(dy, scratch, N, K * S);
    bias_grad_final_kernel<<<static_cast<unsigned>(K), kThreads>>>(scratch, dbias, K * S, S, g.y, accumulate);
    return last_error();
}
int scale(float* x, float alpha, size_t n) {
    scale_kernel<<<blocks_for(n), kThreads>>>(x, alpha, n);
    return last_error();
}
int axpy(float alpha, const float* x, float* y, size_t n) {
    axpy_kernel<<<blocks_for(n), kThreads>>>(alpha, x, y, n);
    return last_error();
}
int sum_squares_and_nonfinite(const float* x, size_t n, ReduceResult* res, bool want_sum) {
    sumsq_kernel<<<blocks_for(n) > 1024 ? 1024 : blocks_for(n), kThreads>>>(x, n, res, want_sum);
    return last_error();
}
int reset_result(ReduceResult* res) {
    reset_kernel<<<1, 1>>>(res);
    return last_error();
}
int softmax_ce_forward(const float* logits, const float* labels, float* probs, int64_t N, int64_t K,
                       ReduceResult* res) {
    const int64_t threads = N * 32;
    softmax_ce_fwd_kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads>>>(logits, labels,
                                                                                                   probs, N, K, res);
    return last_error();
}
int softmax_ce_backward(const float* probs, const float* labels, float* dlogits, int64_t N, int64_t K, float scale) {
    softmax_ce_bwd_kernel<<<blocks_for(static_cast<size_t>(N * K)), kThreads>>>(probs, labels, dlogits, N, K, scale);
    return last_error();
}
int sigmoid_bce_forward(const float* logits, const float* targets, float* probs, int64_t N, ReduceResult* res) {
    sigmoid_bce_fwd_kernel<<<blocks_for(static_cast<size_t>(N)), kThreads>>>(logits, targets, probs, N, res);
    return last_error();
}
int sigmoid_bce_backward(const float* probs, const float* targets, float* dlogits, int64_t N, float scale) {
    sigmoid_bce_bwd_kernel<<<blocks_for(static_cast<size_t>(N)), kThreads>>>(probs, targets, dlogits, N, scale);
    return last_error();
}
int sgd_update(float* w, const float* g, float* v, size_t n, float lr, float momentum, float wd, bool nesterov) {
    sgd_kernel<<<blocks_for(n), kThreads>>>(w, g, v, n, lr, momentum, wd, nesterov);
    return last_error();
}
int adam_update(float* w, const float* g, float* m, float* v, size_t n, float step_size, float bc2_sqrt, float b1,
                float b2, float eps, float wd) {
    adam_kernel<<<blocks_for(n), kThreads>>>(w, g, m, v, n, step_size, bc2_sqrt, b1, b2, eps, wd);
    return last_error();
}
int adadelta_update(float* w, const float* g, float* sq, float* acc, size_t n, float lr, float rho, float eps,
                    float wd) {
    adadelta_kernel<<<blocks_for(n), kThreads>>>(w, g, sq, acc, n, lr, rho, eps, wd);
    return last_error();
}

}  // namespace ringtrain::ops::cuda::kernels
