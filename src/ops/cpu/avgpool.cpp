// CPU average pooling (windows as max pooling; the divisor counts padded positions, as PyTorch's default).
#include <algorithm>

#include "cpu_ops.hpp"
#include "parallel.hpp"

namespace ringtrain::ops::cpu {

namespace {

// Calls f(o, h0, h1, w0, w1) for every output position o = op * Q + oq of one P x Q plane, with its window clipped
// to the H x W input (padding adds no positions, but still counts in the divisor).
template <class F>
void for_each_window(int64_t H, int64_t W, int64_t P, int64_t Q, const Pool2dParams& p, F&& f) {
    for (int64_t op = 0; op < P; ++op) {
        const int64_t hs = op * p.stride_h - p.pad_h;
        const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + p.kernel_h, H);
        for (int64_t oq = 0; oq < Q; ++oq) {
            const int64_t ws = oq * p.stride_w - p.pad_w;
            f(op * Q + oq, h0, h1, std::max<int64_t>(ws, 0), std::min(ws + p.kernel_w, W));
        }
    }
}

}  // namespace

void avgpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    const int64_t H = x.dim(2), W = x.dim(3), P = y.dim(2), Q = y.dim(3);
    const float inv_area = 1.0f / static_cast<float>(p.kernel_h * p.kernel_w);
    const float* px = x.data();
    float* py = y.data();
    parallel_for(x.dim(0) * x.dim(1), [&](int64_t i) {
        const float* xp = px + i * H * W;
        float* yp = py + i * P * Q;
        for_each_window(H, W, P, Q, p, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
            float s = 0.0f;
            for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) s += xp[h * W + w];
            yp[o] = s * inv_area;
        });
    });
}

void avgpool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    const int64_t H = dx.dim(2), W = dx.dim(3), P = dy.dim(2), Q = dy.dim(3);
    const float inv_area = 1.0f / static_cast<float>(p.kernel_h * p.kernel_w);
    const float* pdy = dy.data();
    float* pdx = dx.data();
    parallel_for(dx.dim(0) * dx.dim(1), [&](int64_t i) {
        const float* dyp = pdy + i * P * Q;
        float* dxp = pdx + i * H * W;
        std::fill(dxp, dxp + H * W, 0.0f);  // windows may overlap or skip positions: add into zeros
        for_each_window(H, W, P, Q, p, [&](int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
            const float g = dyp[o] * inv_area;
            for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) dxp[h * W + w] += g;
        });
    });
}

void global_avgpool_forward(const Tensor& x, Tensor& y) {
    const int64_t S = x.dim(2) * x.dim(3);
    const float* px = x.data();
    float* py = y.data();
    parallel_for(x.dim(0) * x.dim(1), [&](int64_t i) {
        const float* xp = px + i * S;
        double s = 0.0;  // large planes: a double sum keeps the mean exact to float precision
        for (int64_t k = 0; k < S; ++k) s += xp[k];
        py[i] = static_cast<float>(s / static_cast<double>(S));
    });
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
    const int64_t S = dx.dim(2) * dx.dim(3);
    const float* pdy = dy.data();
    float* pdx = dx.data();
    parallel_for(dx.dim(0) * dx.dim(1), [&](int64_t i) {
        const float g = pdy[i] / static_cast<float>(S);
        std::fill(pdx + i * S, pdx + (i + 1) * S, g);
    });
}

}  // namespace ringtrain::ops::cpu
