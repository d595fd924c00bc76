// CPU convolution: im2col + one Eigen GEMM per sample (or per group of samples when the output plane is small),
// col2im for the data gradient; 1x1 / stride 1 / no padding convolutions skip im2col altogether.
//
// Layouts (row-major): x_n [C, H*W], w [K, C*R*S], y_n [K, P*Q], col [C*R*S, cols] where column b*P*Q + p*Q + q
// of a group holds sample b's receptive field at output (p, q).
//   forward:         y_n   = w · col_n            (+ bias per row)
//   backward data:   dcol  = wᵀ · dy_n, dx_n = col2im(dcol)
//   backward filter: dw   += dy_n · col_nᵀ,  dbias += row sums of dy_n
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu_ops.hpp"
#include "parallel.hpp"

namespace ringtrain::ops::cpu {

namespace {

struct Geom {
    int64_t N, C, H, W, K, R, S, P, Q, sh, sw, ph, pw;
    int64_t crs() const { return C * R * S; }
    int64_t hw() const { return H * W; }
    int64_t pq() const { return P * Q; }
    bool direct() const { return R == 1 && S == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

Geom geom(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
    return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], p.stride_h, p.stride_w, p.pad_h, p.pad_w};
}

// Output columns q whose input column q*sw - pw + s lies inside [0, W): [q0, q1).
inline void valid_q(const Geom& g, int64_t s, int64_t& q0, int64_t& q1) {
    const int64_t lo = g.pw - s;  // need q*sw >= lo
    q0 = lo > 0 ? (lo + g.sw - 1) / g.sw : 0;
    const int64_t hi = g.W - 1 + g.pw - s;  // need q*sw <= hi
    q1 = hi < 0 ? 0 : std::min(g.Q, hi / g.sw + 1);
    q0 = std::min(q0, g.Q);
    q1 = std::max(q1, q0);
}

using v8 = float __attribute__((vector_size(32)));
using v4 = float __attribute__((vector_size(16)));
template <class V>
inline V load_vec(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class V>
inline void store_vec(float* p, V v) {
    std::memcpy(p, &v, sizeof v);
}

// Copies n floats with whole-vector moves, the last one overlapping the previous (never past dst + n or src + n).
// im2col copies one output row (Q floats, 10-28 in the shipped models) per call, and a memcpy call per 40-100 bytes
// measured slower than this (bench/RESULTS.md, "Measurements moved out of code comments").
inline void copy_row(float* dst, const float* src, int64_t n) {
    if (n >= 8) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) store_vec(dst + i, load_vec<v8>(src + i));
        if (i < n) store_vec(dst + n - 8, load_vec<v8>(src + n - 8));
    } else if (n >= 4) {
        store_vec(dst, load_vec<v4>(src));
        store_vec(dst + n - 4, load_vec<v4>(src + n - 4));
    } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    }
}

// Writes sample x_n [C,H,W] into col rows (c, r, s), columns [0, P*Q), row stride ld.
void im2col(const Geom& g, const float* x, float* col, int64_t ld) {
    parallel_for(g.C, [&](int64_t c) {
        const float* xc = x + c * g.hw();
        for (int64_t r = 0; r < g.R; ++r) {
            for (int64_t s = 0; s < g.S; ++s) {
                float* row = col + ((c * g.R + r) * g.S + s) * ld;
                int64_t q0, q1;
                valid_q(g, s, q0, q1);
                for (int64_t p = 0; p < g.P; ++p) {
                    float* out = row + p * g.Q;
                    const int64_t h = p * g.sh - g.ph + r;
                    if (h < 0 || h >= g.H) {
                        std::fill(out, out + g.Q, 0.0f);
                        continue;
                    }
                    std::fill(out, out + q0, 0.0f);
                    const float* xr = xc + h * g.W - g.pw + s;  // xr[q*sw] is input (h, q*sw - pw + s)
                    if (g.sw == 1) {
                        copy_row(out + q0, xr + q0, q1 - q0);
                    } else {
                        for (int64_t q = q0; q < q1; ++q) out[q] = xr[q * g.sw];
                    }
                    std::fill(out + q1, out + g.Q, 0.0f);
                }
            }
        }
    });
}

// Adds col rows (c, r, s), columns [0, P*Q) with row stride ld back into dx_n [C,H,W] (the adjoint of im2col).
void col2im(const Geom& g, const float* col, int64_t ld, float* dx) {
    parallel_for(g.C, [&](int64_t c) {
        float* dxc = dx + c * g.hw();
        for (int64_t r = 0; r < g.R; ++r) {
            for (int64_t s = 0; s < g.S; ++s) {
                const float* row = col + ((c * g.R + r) * g.S + s) * ld;
                int64_t q0, q1;
                valid_q(g, s, q0, q1);
                for (int64_t p = 0; p < g.P; ++p) {
                    const int64_t h = p * g.sh - g.ph + r;
                    if (h < 0 || h >= g.H) continue;
                    const float* in = row + p * g.Q;
                    float* xr = dxc + h * g.W - g.pw + s;
                    if (g.sw == 1) {
                        for (int64_t q = q0; q < q1; ++q) xr[q] += in[q];
                    } else {
                        for (int64_t q = q0; q < q1; ++q) xr[q * g.sw] += in[q];
                    }
                }
            }
        }
    });
}

// Samples per GEMM: enough that a GEMM has conv_min_gemm_columns() columns, capped by N and by a 32 MiB
// column buffer.
int64_t group_size(const Geom& g) {
    const int64_t want = conv_min_gemm_columns();
    int64_t b = std::max<int64_t>(1, (want + g.pq() - 1) / std::max<int64_t>(1, g.pq()));
    const int64_t cap = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, g.crs() * g.pq()));
    return std::clamp<int64_t>(std::min(b, cap), 1, std::max<int64_t>(1, g.N));
}

void add_bias_rows(float* y, const float* bias, int64_t K, int64_t cols) {
    for (int64_t k = 0; k < K; ++k) {
        float* row = y + k * cols;
        const float b = bias[k];
        for (int64_t j = 0; j < cols; ++j) row[j] += b;
    }
}

// First layers of image models have one input channel (C = 1), where im2col + GEMM degenerates into thin GEMMs
// (K x R*S times R*S x P*Q with R*S = 9 or 25) that run at a fraction of the GEMM rate. A direct convolution over a
// zero-padded copy of the plane, with 8-wide vectors along output rows held in registers, is several times faster.
constexpr int64_t kLanes = 8;
constexpr int64_t kMaxBlocks = 8;  // output rows up to 64 wide

inline v8 splat8(float x) { return v8{x, x, x, x, x, x, x, x}; }

bool single_channel_direct(const Geom& g) {
    return g.C == 1 && g.sh == 1 && g.sw == 1 && g.R * g.S <= 64 && g.Q <= kLanes * kMaxBlocks;
}

// Row stride of the padded plane: the padded width plus a vector of zeros, so full-vector reads past the last
// output column stay inside the row.
int64_t padded_stride(const Geom& g) { return g.W + 2 * g.pw + kLanes; }
size_t padded_floats(const Geom& g) { return static_cast<size_t>((g.H + 2 * g.ph + 1) * padded_stride(g)); }

void pad_plane(const Geom& g, const float* x, float* buf) {
    const int64_t ld = padded_stride(g);
    std::fill(buf, buf + padded_floats(g), 0.0f);
    for (int64_t h = 0; h < g.H; ++h) std::memcpy(buf + (h + g.ph) * ld + g.pw, x + h * g.W, g.W * sizeof(float));
}

// NB (vectors per output row) is a template parameter so the accumulators live in registers.
template <int64_t nb>
void direct_forward_c1(const Geom& g, const float* x, const float* w, const float* bias, float* y, float* pad) {
    const int64_t ld = padded_stride(g), RS = g.R * g.S, PQ = g.pq();
    for (int64_t n = 0; n < g.N; ++n) {
        pad_plane(g, x + n * g.hw(), pad);
        for (int64_t k = 0; k < g.K; ++k) {
            const float* wk = w + k * RS;
            float* yk = y + (n * g.K + k) * PQ;
            const v8 b = splat8(bias ? bias[k] : 0.0f);
            for (int64_t p = 0; p < g.P; ++p) {
                v8 acc[nb];
                for (int64_t j = 0; j < nb; ++j) acc[j] = b;
                for (int64_t r = 0; r < g.R; ++r) {
                    const float* xr = pad + (p + r) * ld;
                    for (int64_t s = 0; s < g.S; ++s) {
                        const v8 wv = splat8(wk[r * g.S + s]);
                        for (int64_t j = 0; j < nb; ++j) acc[j] += wv * load_vec<v8>(xr + s + j * kLanes);
                    }
                }
                float out[kLanes * kMaxBlocks];
                std::memcpy(out, acc, static_cast<size_t>(nb) * sizeof(v8));
                std::memcpy(yk + p * g.Q, out, static_cast<size_t>(g.Q) * sizeof(float));
            }
        }
    }
}

template <int64_t nb>
void direct_backward_filter_c1(const Geom& g, const float* x, const float* dy, float* dw, float* db, float* pad) {
    const int64_t ld = padded_stride(g), RS = g.R * g.S, PQ = g.pq();
    std::vector<v8> acc(static_cast<size_t>(g.K * RS));
    for (auto& a : acc) a = splat8(0.0f);
    for (int64_t n = 0; n < g.N; ++n) {
        pad_plane(g, x + n * g.hw(), pad);
        for (int64_t k = 0; k < g.K; ++k) {
            const float* dyk = dy + (n * g.K + k) * PQ;
            v8* ak = acc.data() + k * RS;
            for (int64_t p = 0; p < g.P; ++p) {
                // dy row, zero beyond Q, so lanes past the last output column add nothing.
                float row[kLanes * kMaxBlocks] = {};
                std::memcpy(row, dyk + p * g.Q, static_cast<size_t>(g.Q) * sizeof(float));
                v8 d[nb];
                for (int64_t j = 0; j < nb; ++j) d[j] = load_vec<v8>(row + j * kLanes);
                for (int64_t r = 0; r < g.R; ++r) {
                    const float* xr = pad + (p + r) * ld;
                    for (int64_t s = 0; s < g.S; ++s) {
                        v8 a = ak[r * g.S + s];
                        for (int64_t j = 0; j < nb; ++j) a += d[j] * load_vec<v8>(xr + s + j * kLanes);
                        ak[r * g.S + s] = a;
                    }
                }
            }
            if (db) {
                float sum = 0.0f;
                for (int64_t j = 0; j < PQ; ++j) sum += dyk[j];
                db[k] += sum;
            }
        }
    }
    for (int64_t i = 0; i < g.K * RS; ++i) {
        float lanes[kLanes];
        std::memcpy(lanes, &acc[i], sizeof lanes);
        float sum = 0.0f;
        for (float v : lanes) sum += v;
        dw[i] += sum;
    }
}

template <template <int64_t> class F, typename... A>
void with_blocks(int64_t q, A&&... args) {
    switch ((q + kLanes - 1) / kLanes) {
        case 1: return F<1>::run(args...);
        case 2: return F<2>::run(args...);
        case 3: return F<3>::run(args...);
        case 4: return F<4>::run(args...);
        case 5: return F<5>::run(args...);
        case 6: return F<6>::run(args...);
        case 7: return F<7>::run(args...);
        default: return F<8>::run(args...);
    }
}
template <int64_t nb>
struct DirectForward {
    template <typename... A>
    static void run(A... a) { direct_forward_c1<nb>(a...); }
};
template <int64_t nb>
struct DirectBackwardFilter {
    template <typename... A>
    static void run(A... a) { direct_backward_filter_c1<nb>(a...); }
};

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
                    Workspace& ws) {
    const Geom g = geom(x.shape(), w.shape(), y.shape(), p);
    const int64_t CRS = g.crs(), PQ = g.pq(), K = g.K;
    const float* px = x.data();
    const float* pw = w.data();
    const float* pb = bias.empty() ? nullptr : bias.data();
    float* py = y.data();
    if (single_channel_direct(g)) {
        with_blocks<DirectForward>(g.Q, g, px, pw, pb, py, ws.floats(padded_floats(g)));
        return;
    }
    if (g.direct()) {
        for (int64_t n = 0; n < g.N; ++n) {
            float* yn = py + n * K * PQ;
            gemm_raw(false, false, K, PQ, CRS, 1.0f, pw, CRS, px + n * g.C * g.hw(), PQ, 0.0f, yn, PQ);
            if (pb) add_bias_rows(yn, pb, K, PQ);
        }
        return;
    }
    const int64_t B = group_size(g);
    if (B == 1) {
        float* col = ws.floats(static_cast<size_t>(CRS * PQ));
        for (int64_t n = 0; n < g.N; ++n) {
            float* yn = py + n * K * PQ;
            im2col(g, px + n * g.C * g.hw(), col, PQ);
            gemm_raw(false, false, K, PQ, CRS, 1.0f, pw, CRS, col, PQ, 0.0f, yn, PQ);
            if (pb) add_bias_rows(yn, pb, K, PQ);
        }
        return;
    }
    float* col = ws.floats(static_cast<size_t>((CRS + K) * B * PQ));
    float* yg = col + CRS * B * PQ;
    for (int64_t n0 = 0; n0 < g.N; n0 += B) {
        const int64_t b = std::min(B, g.N - n0), ld = b * PQ;
        for (int64_t i = 0; i < b; ++i) im2col(g, px + (n0 + i) * g.C * g.hw(), col + i * PQ, ld);
        gemm_raw(false, false, K, ld, CRS, 1.0f, pw, CRS, col, ld, 0.0f, yg, ld);
        for (int64_t i = 0; i < b; ++i) {
            float* yn = py + (n0 + i) * K * PQ;
            for (int64_t k = 0; k < K; ++k) {
                const float* src = yg + k * ld + i * PQ;
                float* dst = yn + k * PQ;
                const float bk = pb ? pb[k] : 0.0f;
                for (int64_t j = 0; j < PQ; ++j) dst[j] = src[j] + bk;
            }
        }
    }
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p, Workspace& ws) {
    const Geom g = geom(dx.shape(), w.shape(), dy.shape(), p);
    const int64_t CRS = g.crs(), PQ = g.pq(), K = g.K, CHW = g.C * g.hw();
    const float* pdy = dy.data();
    const float* pw = w.data();
    float* pdx = dx.data();
    if (g.direct()) {
        for (int64_t n = 0; n < g.N; ++n)
            gemm_raw(true, false, CRS, PQ, K, 1.0f, pw, CRS, pdy + n * K * PQ, PQ, 0.0f, pdx + n * CHW, PQ);
        return;
    }
    const int64_t B = group_size(g);
    if (B == 1) {
        float* dcol = ws.floats(static_cast<size_t>(CRS * PQ));
        for (int64_t n = 0; n < g.N; ++n) {
            gemm_raw(true, false, CRS, PQ, K, 1.0f, pw, CRS, pdy + n * K * PQ, PQ, 0.0f, dcol, PQ);
            float* dxn = pdx + n * CHW;
            std::fill(dxn, dxn + CHW, 0.0f);
            col2im(g, dcol, PQ, dxn);
        }
        return;
    }
    float* dcol = ws.floats(static_cast<size_t>((CRS + K) * B * PQ));
    float* dyg = dcol + CRS * B * PQ;
    for (int64_t n0 = 0; n0 < g.N; n0 += B) {
        const int64_t b = std::min(B, g.N - n0), ld = b * PQ;
        for (int64_t i = 0; i < b; ++i)
            for (int64_t k = 0; k < K; ++k)
                std::memcpy(dyg + k * ld + i * PQ, pdy + ((n0 + i) * K + k) * PQ, static_cast<size_t>(PQ) * sizeof(float));
        gemm_raw(true, false, CRS, ld, K, 1.0f, pw, CRS, dyg, ld, 0.0f, dcol, ld);
        for (int64_t i = 0; i < b; ++i) {
            float* dxn = pdx + (n0 + i) * CHW;
            std::fill(dxn, dxn + CHW, 0.0f);
            col2im(g, dcol + i * PQ, ld, dxn);
        }
    }
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias, const Conv2dParams& p,
                            Workspace& ws, bool accumulate) {
    const Geom g = geom(x.shape(), dw.shape(), dy.shape(), p);
    const int64_t CRS = g.crs(), PQ = g.pq(), K = g.K, CHW = g.C * g.hw();
    const float* px = x.data();
    const float* pdy = dy.data();
    float* pdw = dw.data();
    float* pdb = dbias.empty() ? nullptr : dbias.data();
    if (!accumulate) {
        if (g.N == 0) std::fill(pdw, pdw + dw.numel(), 0.0f);
        if (pdb) std::fill(pdb, pdb + K, 0.0f);
    }
    float beta = accumulate ? 1.0f : 0.0f;
    // The direct filter gradient keeps one accumulator per kernel tap in memory; with few taps (3x3) the
    // im2col + GEMM path measured faster (bench_conv: MNIST conv1), with 5x5 the direct one (LeNet conv1; numbers in
    // bench/RESULTS.md, "Measurements moved out of code comments").
    if (single_channel_direct(g) && g.R * g.S >= 16) {
        if (!accumulate) std::fill(pdw, pdw + dw.numel(), 0.0f);
        with_blocks<DirectBackwardFilter>(g.Q, g, px, pdy, pdw, pdb, ws.floats(padded_floats(g)));
        return;
    }
    if (g.direct()) {
        for (int64_t n = 0; n < g.N; ++n, beta = 1.0f) {
            const float* dyn = pdy + n * K * PQ;
            gemm_raw(false, true, K, CRS, PQ, 1.0f, dyn, PQ, px + n * CHW, PQ, beta, pdw, CRS);
            if (pdb) add_row_sums(dyn, K, PQ, pdb);
        }
        return;
    }
    const int64_t B = group_size(g);
    if (B == 1) {
        float* col = ws.floats(static_cast<size_t>(CRS * PQ));
        for (int64_t n = 0; n < g.N; ++n, beta = 1.0f) {
            const float* dyn = pdy + n * K * PQ;
            im2col(g, px + n * CHW, col, PQ);
            gemm_raw(false, true, K, CRS, PQ, 1.0f, dyn, PQ, col, PQ, beta, pdw, CRS);
            if (pdb) add_row_sums(dyn, K, PQ, pdb);
        }
        return;
    }
    float* col = ws.floats(static_cast<size_t>((CRS + K) * B * PQ));
    float* dyg = col + CRS * B * PQ;
    for (int64_t n0 = 0; n0 < g.N; n0 += B, beta = 1.0f) {
        const int64_t b = std::min(B, g.N - n0), ld = b * PQ;
        for (int64_t i = 0; i < b; ++i) {
            im2col(g, px + (n0 + i) * CHW, col + i * PQ, ld);
            for (int64_t k = 0; k < K; ++k)
                std::memcpy(dyg + k * ld + i * PQ, pdy + ((n0 + i) * K + k) * PQ, static_cast<size_t>(PQ) * sizeof(float));
        }
        gemm_raw(false, true, K, CRS, ld, 1.0f, dyg, ld, col, ld, beta, pdw, CRS);
        if (pdb) add_row_sums(dyg, K, ld, pdb);
    }
}

}  // namespace ringtrain::ops::cpu
