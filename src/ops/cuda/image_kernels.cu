// Kernels of the image layers: average pooling (forward per output, backward per input element: deterministic, the
// CPU op's definition exactly), global average pooling and evaluation-mode BatchNorm backward.
#include <cuda_runtime.h>

#include <cstdint>

#include "image_kernels.hpp"

namespace ringtrain::ops::cuda::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    if (b < 1) b = 1;
    if (b > 8192) b = 8192;  // grid-stride loops cover the rest
    return static_cast<unsigned>(b);
}

int last_error() { return static_cast<int>(cudaGetLastError()); }

#define RT_GRID_LOOP64(i, n) \
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sum of `v` over the block (kThreads threads), valid in thread 0.
__device__ double block_sum(double v) {
    __shared__ double part[kThreads / 32];
    v = warp_sum(v);
    __syncthreads();  // `part` may still be read from a previous call
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x < 32) {
        s = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : 0.0;
        s = warp_sum(s);
    }
    return s;
}

__global__ void avgpool_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, PoolGeometry g,
                                   float inv_area) {
    const int64_t total = g.planes * g.P * g.Q;
    RT_GRID_LOOP64(i, total) {
        const int64_t q = i % g.Q, p = (i / g.Q) % g.P, plane = i / (g.P * g.Q);
        const int64_t hs = p * g.sh - g.ph, ws = q * g.sw - g.pw;
        const int64_t h0 = hs > 0 ? hs : 0, h1 = hs + g.kh < g.H ? hs + g.kh : g.H;
        const int64_t w0 = ws > 0 ? ws : 0, w1 = ws + g.kw < g.W ? ws + g.kw : g.W;
        const float* xp = x + plane * g.H * g.W;
        float s = 0.0f;
        for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xp[h * g.W + w];
        y[i] = s * inv_area;
    }
}

// Output rows p whose window [p*s - pad, p*s - pad + k) holds input row h: p in [ceil((h+pad-k+1)/s), (h+pad)/s].
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t pad, int64_t P, int64_t& lo,
                                         int64_t& hi) {
    const int64_t a = h + pad - k + 1;
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    hi = (h + pad) / s;
    if (hi > P - 1) hi = P - 1;
}

__global__ void avgpool_bwd_kernel(const float* __restrict__ dy, float* __restrict__ dx, PoolGeometry g,
                                   float inv_area) {
    const int64_t total = g.planes * g.H * g.W;
    RT_GRID_LOOP64(i, total) {
        const int64_t w = i % g.W, h = (i / g.W) % g.H, plane = i / (g.H * g.W);
        int64_t p0, p1, q0, q1;
        covering(h, g.kh, g.sh, g.ph, g.P, p0, p1);
        covering(w, g.kw, g.sw, g.pw, g.Q, q0, q1);
        const float* dyp = dy + plane * g.P * g.Q;
        float s = 0.0f;
        for (int64_t p = p0; p <= p1; ++p)
            for (int64_t q = q0; q <= q1; ++q) s += dyp[p * g.Q + q];
        dx[i] = s * inv_area;
    }
}

// One block per plane.
__global__ void global_avg_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t S) {
    const float* xp = x + blockIdx.x * S;
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < S; k += blockDim.x) s += xp[k];
    s = block_sum(s);
    if (threadIdx.x == 0) y[blockIdx.x] = static_cast<float>(s / static_cast<double>(S));
}

__global__ void global_avg_bwd_kernel(const float* __restrict__ dy, float* __restrict__ dx, int64_t planes,
                                      int64_t S) {
    RT_GRID_LOOP64(i, planes * S) dx[i] = dy[i / S] / static_cast<float>(S);
}

__global__ void bn_eval_stats_kernel(const float* __restrict__ rm, const float* __restrict__ rv,
                                     float* __restrict__ mean, float* __restrict__ inv, int64_t C, float eps) {
    RT_GRID_LOOP64(c, C) {
        mean[c] = rm[c];
        inv[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(rv[c]) + static_cast<double>(eps)));
    }
}

// One block per channel c.
__global__ void bn_eval_param_grad_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                          const float* __restrict__ mean, const float* __restrict__ inv,
                                          float* __restrict__ dgamma, float* __restrict__ dbeta, int64_t N,
                                          int64_t C, int64_t S, bool accumulate) {
    const int64_t c = blockIdx.x;
    const double mu = mean[c], is = inv[c];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t k = threadIdx.x; k < N * S; k += blockDim.x) {
        const int64_t n = k / S, s = k - n * S;
        const int64_t at = (n * C + c) * S + s;
        sdy += dy[at];
        sdyx += dy[at] * (x[at] - mu) * is;
    }
    sdy = block_sum(sdy);
    sdyx = block_sum(sdyx);
    if (threadIdx.x == 0) {
        dgamma[c] = static_cast<float>(sdyx + (accumulate ? dgamma[c] : 0.0));
        dbeta[c] = static_cast<float>(sdy + (accumulate ? dbeta[c] : 0.0));
    }
}

__global__ void bn_eval_data_grad_kernel(const float* __restrict__ dy, const float* __restrict__ gamma,
                                         const float* __restrict__ inv, float* __restrict__ dx, int64_t C,
                                         int64_t S, int64_t total) {
    RT_GRID_LOOP64(i, total) {
        const int64_t c = (i / S) % C;
        dx[i] = gamma[c] * inv[c] * dy[i];
    }
}

}  // namespace

int avgpool2d_forward(const float* x, float* y, const PoolGeometry& g) {
    const int64_t n = g.planes * g.P * g.Q;
    if (n == 0) return 0;
    avgpool_fwd_kernel<<<blocks_for(n), kThreads>>>(x, y, g, 1.0f / static_cast<float>(g.kh * g.kw));
    return last_error();
}

int avgpool2d_backward(const float* dy, float* dx, const PoolGeometry& g) {
    const int64_t n = g.planes * g.H * g.W;
    if (n == 0) return 0;
    avgpool_bwd_kernel<<<blocks_for(n), kThreads>>>(dy, dx, g, 1.0f / static_cast<float>(g.kh * g.kw));
    return last_error();
}

int global_avgpool_forward(const float* x, float* y, int64_t planes, int64_t S) {
    if (planes == 0) return 0;
    global_avg_fwd_kernel<<<static_cast<unsigned>(planes), kThreads>>>(x, y, S);
    return last_error();
}

int global_avgpool_backward(const float* dy, float* dx, int64_t planes, int64_t S) {
    if (planes * S == 0) return 0;
    global_avg_bwd_kernel<<<blocks_for(planes * S), kThreads>>>(dy, dx, planes, S);
    return last_error();
}

int batchnorm_eval_stats(const float* running_mean, const float* running_var, float* mean, float* inv_std, int64_t C,
                         float eps) {
    if (C == 0) return 0;
    bn_eval_stats_kernel<<<blocks_for(C), kThreads>>>(running_mean, running_var, mean, inv_std, C, eps);
    return last_error();
}

int batchnorm_eval_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                            const float* inv_std, float* dx, float* dgamma, float* dbeta, int64_t N, int64_t C,
                            int64_t S, bool accumulate) {
    if (C == 0) return 0;
    bn_eval_param_grad_kernel<<<static_cast<unsigned>(C), kThreads>>>(x, dy, mean, inv_std, dgamma, dbeta, N, C, S,
                                                                      accumulate);
    if (const int e = last_error(); e != 0) return e;
    if (dx && N * C * S > 0)
        bn_eval_data_grad_kernel<<<blocks_for(N * C * S), kThreads>>>(dy, gamma, inv_std, dx, C, S, N * C * S);
    return last_error();
}

}  // namespace ringtrain::ops::cuda::kernels
