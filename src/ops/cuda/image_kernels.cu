// Kernels of the image layers: average pooling (forward per output, backward per input element: deterministic, the
// CPU op's definition exactly), global average pooling, evaluation-mode BatchNorm backward and synchronised
// BatchNorm's per-channel sums, statistics, normalisation and input gradient.
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


// ---- synchronised BatchNorm ----
// What one (channel, slice) block sums over its share of the channel's N*S values.
enum class BnSum { X, CentredSquares, Gradients };

struct BnSlicing {
    int64_t slices, per_slice;
};
// At least kThreads * 8 values per block, at most 256 slices per channel: enough blocks to fill a GPU for the usual
// channel counts, few partials per channel. A function of the shape alone (deterministic sums).
BnSlicing bn_slicing(int64_t N, int64_t S) {
    const int64_t m = N * S, min_per_block = int64_t{kThreads} * 8;
    int64_t slices = (m + min_per_block - 1) / min_per_block;
    if (slices < 1) slices = 1;
    if (slices > 256) slices = 256;
    return {slices, (m + slices - 1) / slices};
}

// Block b: channel b / slices, slice b % slices. partial[(r * C + c) * slices + slice] for the r-th sum (r = 0, and
// 1 for Gradients: sum dy * xhat). The terms are formed in double in the CPU op's order.
template <BnSum kWhat>
__global__ void bn_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  const double* __restrict__ mu, const float* __restrict__ mean,
                                  const float* __restrict__ inv, double* __restrict__ partial, int64_t N, int64_t C,
                                  int64_t S, int64_t slices, int64_t per_slice) {
    const int64_t c = blockIdx.x / slices, slice = blockIdx.x % slices;
    const int64_t begin = slice * per_slice, end = begin + per_slice < N * S ? begin + per_slice : N * S;
    double centre = 0.0, scale = 0.0;
    if (kWhat == BnSum::CentredSquares) centre = mu[c];
    if (kWhat == BnSum::Gradients) {
        centre = mean[c];
        scale = inv[c];
    }
    double a = 0.0, b = 0.0;
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
        const int64_t n = k / S, at = (n * C + c) * S + (k - n * S);
        if (kWhat == BnSum::X) {
            a += x[at];
        } else if (kWhat == BnSum::CentredSquares) {
            const double d = x[at] - centre;
            a += d * d;
        } else {
            a += dy[at];
            b += dy[at] * (x[at] - centre) * scale;
        }
    }
    a = block_sum(a);
    if (kWhat == BnSum::Gradients) b = block_sum(b);
    if (threadIdx.x == 0) {
        partial[c * slices + slice] = a;
        if (kWhat == BnSum::Gradients) partial[(C + c) * slices + slice] = b;
    }
}

// out[r] = partial[r * slices ...] added in slice order, for `rows` rows. With dgamma/dbeta (rows = 2C): dbeta[c]
// (+)= out[c], dgamma[c] (+)= out[C + c].
__global__ void bn_finish_kernel(const double* __restrict__ partial, double* __restrict__ out, int64_t rows,
                                 int64_t slices, int64_t C, float* __restrict__ dgamma, float* __restrict__ dbeta,
                                 bool accumulate) {
    RT_GRID_LOOP64(r, rows) {
        double s = 0.0;
        for (int64_t k = 0; k < slices; ++k) s += partial[r * slices + k];
        out[r] = s;
        if (dgamma) {
            float& g = r < C ? dbeta[r] : dgamma[r - C];
            g = static_cast<float>(s + (accumulate ? g : 0.0));
        }
    }
}

__global__ void bn_global_stats_kernel(const double* __restrict__ mu, const double* __restrict__ ss, double m,
                                       double eps, double momentum, const float* __restrict__ gamma,
                                       const float* __restrict__ beta, float* __restrict__ mean,
                                       float* __restrict__ inv_std, float* __restrict__ running_mean,
                                       float* __restrict__ running_var, float* __restrict__ scale,
                                       float* __restrict__ shift, int64_t C) {
    RT_GRID_LOOP64(c, C) {
        const double u = mu[c], inv = 1.0 / sqrt(ss[c] / m + eps);
        running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * u);
        running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * (ss[c] / (m - 1.0)));
        mean[c] = static_cast<float>(u);
        inv_std[c] = static_cast<float>(inv);
        scale[c] = static_cast<float>(gamma[c] * inv);
        shift[c] = static_cast<float>(beta[c] - gamma[c] * inv * u);
    }
}

__global__ void bn_scale_shift_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      const float* __restrict__ scale, const float* __restrict__ shift, int64_t C,
                                      int64_t S, int64_t total) {
    RT_GRID_LOOP64(i, total) {
        const int64_t c = (i / S) % C;
        y[i] = x[i] * scale[c] + shift[c];
    }
}

__global__ void bn_input_grad_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                     const float* __restrict__ gamma, const float* __restrict__ mean,
                                     const float* __restrict__ inv_std, const double* __restrict__ means,
                                     float* __restrict__ dx, int64_t C, int64_t S, int64_t total) {
    RT_GRID_LOOP64(i, total) {
        const int64_t c = (i / S) % C;
        const double mu = mean[c], inv = inv_std[c], gi = gamma[c] * inv;
        dx[i] = static_cast<float>(gi * (dy[i] - means[c] - (x[i] - mu) * inv * means[C + c]));
    }
}

template <BnSum kWhat>
int bn_reduce(const float* x, const float* dy, const double* mu, const float* mean, const float* inv, double* out,
              int64_t N, int64_t C, int64_t S, double* scratch, float* dgamma, float* dbeta, bool accumulate) {
    if (C == 0) return 0;
    const BnSlicing sl = bn_slicing(N, S);
    bn_partial_kernel<kWhat><<<static_cast<unsigned>(C * sl.slices), kThreads>>>(x, dy, mu, mean, inv, scratch, N, C,
                                                                                 S, sl.slices, sl.per_slice);
    if (const int e = last_error(); e != 0) return e;
    const int64_t rows = kWhat == BnSum::Gradients ? 2 * C : C;
    bn_finish_kernel<<<blocks_for(rows), kThreads>>>(scratch, out, rows, sl.slices, C, dgamma, dbeta, accumulate);
    return last_error();
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

size_t bn_reduce_scratch_doubles(int64_t N, int64_t C, int64_t S) {
    return static_cast<size_t>(2 * C * bn_slicing(N, S).slices);
}

int bn_channel_sums(const float* x, double* sums, int64_t N, int64_t C, int64_t S, double* scratch) {
    return bn_reduce<BnSum::X>(x, nullptr, nullptr, nullptr, nullptr, sums, N, C, S, scratch, nullptr, nullptr,
                               false);
}

int bn_channel_centred_squares(const float* x, const double* mu, double* squares, int64_t N, int64_t C, int64_t S,
                               double* scratch) {
    return bn_reduce<BnSum::CentredSquares>(x, nullptr, mu, nullptr, nullptr, squares, N, C, S, scratch, nullptr,
                                            nullptr, false);
}

int bn_apply_global_stats(const double* mu, const double* ss, double m, float eps, float momentum, const float* gamma,
                          const float* beta, float* mean, float* inv_std, float* running_mean, float* running_var,
                          float* scale, float* shift, int64_t C) {
    if (C == 0) return 0;
    bn_global_stats_kernel<<<blocks_for(C), kThreads>>>(mu, ss, m, static_cast<double>(eps),
                                                        static_cast<double>(momentum), gamma, beta, mean, inv_std,
                                                        running_mean, running_var, scale, shift, C);
    return last_error();
}

int bn_scale_shift(const float* x, float* y, const float* scale, const float* shift, int64_t N, int64_t C,
                   int64_t S) {
    const int64_t total = N * C * S;
    if (total == 0) return 0;
    bn_scale_shift_kernel<<<blocks_for(total), kThreads>>>(x, y, scale, shift, C, S, total);
    return last_error();
}

int bn_gradient_sums(const float* x, const float* dy, const float* mean, const float* inv_std, double* sums,
                     float* dgamma, float* dbeta, int64_t N, int64_t C, int64_t S, bool accumulate, double* scratch) {
    return bn_reduce<BnSum::Gradients>(x, dy, nullptr, mean, inv_std, sums, N, C, S, scratch, dgamma, dbeta,
                                       accumulate);
}

int bn_input_gradient(const float* x, const float* dy, const float* gamma, const float* mean, const float* inv_std,
                      const double* means, float* dx, int64_t N, int64_t C, int64_t S) {
    const int64_t total = N * C * S;
    if (total == 0) return 0;
    bn_input_grad_kernel<<<blocks_for(total), kThreads>>>(x, dy, gamma, mean, inv_std, means, dx, C, S, total);
    return last_error();
}

}  // namespace ringtrain::ops::cuda::kernels
