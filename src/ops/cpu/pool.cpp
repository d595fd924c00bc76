// CPU max pooling. Backward recomputes the argmax: the first position in row-major window order whose value
// equals the forward output (falling back to a strict first-max scan), so no index tensor is stored.
#include <algorithm>
#include <limits>

#include "cpu_ops.hpp"
#include "parallel.hpp"

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace ringtrain::ops::cpu {

namespace {
struct PoolGeom {
    int64_t H, W, P, Q;
    Pool2dParams p;
    // Window of output (op, oq) clipped to the input: rows [h0, h1), cols [w0, w1).
    void window(int64_t op, int64_t oq, int64_t& h0, int64_t& h1, int64_t& w0, int64_t& w1) const {
        const int64_t hs = op * p.stride_h - p.pad_h, ws = oq * p.stride_w - p.pad_w;
        h0 = std::max<int64_t>(hs, 0);
        h1 = std::min(hs + p.kernel_h, H);
        w0 = std::max<int64_t>(ws, 0);
        w1 = std::min(ws + p.kernel_w, W);
    }
};

// Index (into the plane) of the first maximum of the window; -1 for an empty window.
inline int64_t first_max(const float* xp, const PoolGeom& g, int64_t op, int64_t oq, float* value) {
    int64_t h0, h1, w0, w1;
    g.window(op, oq, h0, h1, w0, w1);
    int64_t best = -1;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) {
            const float v = xp[h * g.W + w];
            if (best < 0 || v > m) {
                m = v;
                best = h * g.W + w;
            }
        }
    *value = m;
    return best;
}
#ifdef __AVX2__
// The 2x2 / stride 2 windows eight at a time (the common case: LeNet-5, the MNIST CNN, the quality CNN), with the
// scalar code's comparisons and products lane by lane, so results are identical; the scalar loops measured ~2x
// slower (the strided pairs defeat the auto-vectoriser).
// Even and odd elements of the 16 floats at p: {p[0], p[2], ..., p[14]} and {p[1], ..., p[15]}.
inline void deinterleave16(const float* p, __m256& even, __m256& odd) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}
inline void interleave16(float* p, __m256 even, __m256 odd) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
inline __m256 greater(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }  // a > b per lane
#endif
}  // namespace

void maxpool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
    const PoolGeom g{x.dim(2), x.dim(3), y.dim(2), y.dim(3), p};
    const int64_t planes = x.dim(0) * x.dim(1);
    const float* px = x.data();
    float* py = y.data();
    const bool fast22 = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
                        p.pad_w == 0;
    parallel_for(planes, [&](int64_t i) {
        const float* xp = px + i * g.H * g.W;
        float* yp = py + i * g.P * g.Q;
        if (fast22) {
            for (int64_t op = 0; op < g.P; ++op) {
                const float* r0 = xp + 2 * op * g.W;
                const float* r1 = r0 + g.W;
                int64_t oq = 0;
#ifdef __AVX2__
                for (; oq + 8 <= g.Q; oq += 8) {  // m = a; if (b > m) m = b; ... as below
                    __m256 a, b, c, d;
                    deinterleave16(r0 + 2 * oq, a, b);
                    deinterleave16(r1 + 2 * oq, c, d);
                    __m256 m = _mm256_blendv_ps(a, b, greater(b, a));
                    m = _mm256_blendv_ps(m, c, greater(c, m));
                    m = _mm256_blendv_ps(m, d, greater(d, m));
                    _mm256_storeu_ps(yp + op * g.Q + oq, m);
                }
#endif
                for (; oq < g.Q; ++oq) {
                    float m = r0[2 * oq];
                    if (r0[2 * oq + 1] > m) m = r0[2 * oq + 1];
                    if (r1[2 * oq] > m) m = r1[2 * oq];
                    if (r1[2 * oq + 1] > m) m = r1[2 * oq + 1];
                    yp[op * g.Q + oq] = m;
                }
            }
            return;
        }
        for (int64_t op = 0; op < g.P; ++op)
            for (int64_t oq = 0; oq < g.Q; ++oq) first_max(xp, g, op, oq, &yp[op * g.Q + oq]);
    });
}

namespace {
// With `relu` the input x is a ReLU's output and that ReLU's backward is applied too: the gradient reaches a window's
// first maximum only where x there (the window's max) is > 0, the ReLU's own mask at that position.
template <bool relu>
void maxpool_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    const PoolGeom g{x.dim(2), x.dim(3), y.dim(2), y.dim(3), p};
    const int64_t planes = x.dim(0) * x.dim(1);
    const float* px = x.data();
    const float* py = y.data();
    const float* pdy = dy.data();
    float* pdx = dx.data();
    const bool fast22 = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
                        p.pad_w == 0;
    parallel_for(planes, [&](int64_t i) {
        const float* xp = px + i * g.H * g.W;
        const float* yp = py + i * g.P * g.Q;
        const float* dyp = pdy + i * g.P * g.Q;
        float* dxp = pdx + i * g.H * g.W;
        if (fast22) {
            // Windows do not overlap: each x position gets its gradient written once. The comparison chain is the
            // forward's, so the winner is the first maximum in window order, as in the general path.
            if (g.H != 2 * g.P || g.W != 2 * g.Q) std::fill(dxp, dxp + g.H * g.W, 0.0f);  // odd edge rows/cols
            for (int64_t op = 0; op < g.P; ++op) {
                const float* r0 = xp + 2 * op * g.W;
                const float* r1 = r0 + g.W;
                float* d0 = dxp + 2 * op * g.W;
                float* d1 = d0 + g.W;
                int64_t oq = 0;
#ifdef __AVX2__
                const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
                for (; oq + 8 <= g.Q; oq += 8) {  // the scalar loop's steps below, eight windows at once
                    __m256 a, b, c, d;
                    deinterleave16(r0 + 2 * oq, a, b);
                    deinterleave16(r1 + 2 * oq, c, d);
                    const __m256 hi01 = greater(b, a), hi23 = greater(d, c);
                    const __m256 m01 = _mm256_blendv_ps(a, b, hi01), m23 = _mm256_blendv_ps(c, d, hi23);
                    const __m256 lower = greater(m23, m01);
                    __m256 gy = _mm256_loadu_ps(dyp + op * g.Q + oq);
                    if constexpr (relu) gy = _mm256_and_ps(greater(_mm256_blendv_ps(m01, m23, lower), zero), gy);
                    const __m256 lo = _mm256_and_ps(lower, one), h01 = _mm256_and_ps(hi01, one),
                                 h23 = _mm256_and_ps(hi23, one);
                    const __m256 up_g = _mm256_mul_ps(gy, _mm256_sub_ps(one, lo)), lo_g = _mm256_mul_ps(gy, lo);
                    interleave16(d0 + 2 * oq, _mm256_mul_ps(up_g, _mm256_sub_ps(one, h01)), _mm256_mul_ps(up_g, h01));
                    interleave16(d1 + 2 * oq, _mm256_mul_ps(lo_g, _mm256_sub_ps(one, h23)), _mm256_mul_ps(lo_g, h23));
                }
#endif
                for (; oq < g.Q; ++oq) {
                    // First maximum by a branch-free tournament (pairs, then winners; ties go to the earlier
                    // position), the same winner as the forward's chain: the argmax is data-dependent and a
                    // branch per comparison mispredicted often enough to make this several times slower than the
                    // forward (bench/RESULTS.md, "Measurements moved out of code comments").
                    const float a = r0[2 * oq], b = r0[2 * oq + 1], c = r1[2 * oq], d = r1[2 * oq + 1];
                    const bool hi01 = b > a, hi23 = d > c;
                    const float m01 = hi01 ? b : a, m23 = hi23 ? d : c;
                    const bool lower = m23 > m01;
                    // Products with 0/1 instead of conditional stores: GCC turned those into branches.
                    float gy = dyp[op * g.Q + oq];
                    if constexpr (relu) gy = (lower ? m23 : m01) > 0.0f ? gy : 0.0f;
                    const float lo = static_cast<float>(lower), h01 = static_cast<float>(hi01),
                                h23 = static_cast<float>(hi23);
                    const float up_g = gy * (1.0f - lo), lo_g = gy * lo;
                    d0[2 * oq] = up_g * (1.0f - h01);
                    d0[2 * oq + 1] = up_g * h01;
                    d1[2 * oq] = lo_g * (1.0f - h23);
                    d1[2 * oq + 1] = lo_g * h23;
                }
            }
            return;
        }
        std::fill(dxp, dxp + g.H * g.W, 0.0f);
        for (int64_t op = 0; op < g.P; ++op)
            for (int64_t oq = 0; oq < g.Q; ++oq) {
                const float target = yp[op * g.Q + oq];
                int64_t h0, h1, w0, w1;
                g.window(op, oq, h0, h1, w0, w1);
                int64_t at = -1;
                for (int64_t h = h0; h < h1 && at < 0; ++h)
                    for (int64_t w = w0; w < w1; ++w)
                        if (xp[h * g.W + w] == target) {
                            at = h * g.W + w;
                            break;
                        }
                if (at < 0) {  // y does not come from this x (or is NaN): use the first max of x
                    float v;
                    at = first_max(xp, g, op, oq, &v);
                }
                if (at >= 0 && (!relu || xp[at] > 0.0f)) dxp[at] += dyp[op * g.Q + oq];
            }
    });
}
}  // namespace

void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    maxpool_backward<false>(x, y, dy, dx, p);
}

void maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
    maxpool_backward<true>(x, y, dy, dx, p);
}

}  // namespace ringtrain::ops::cpu
